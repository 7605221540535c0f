package signature

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
)

// HMACConfig describes an HMAC signature scheme for NewHMAC: enough to
// configure most providers without a preset.
type HMACConfig struct {
	// SignatureHeader is the header carrying the signature. Required.
	SignatureHeader string
	// AltSignatureHeaders are other names the provider sends the same
	// signature under (Shopify: shopify-hmac-sha256 beside
	// X-Shopify-Hmac-Sha256). A request may carry any of them, or several
	// holding the same value; several holding different values are refused
	// with ErrMalformedHeader, since one was not the provider's. Each is
	// held to the limits of a signature header. Defaults to none.
	AltSignatureHeaders []string
	// Prefix precedes the encoded signature in the header ("sha256=",
	// "v0="). Defaults to none.
	Prefix string
	// Algorithm is the HMAC's hash. Defaults to SHA256.
	Algorithm HashAlgorithm
	// Encoding is how the signature is written. Defaults to Hex.
	Encoding Encoding
	// TimestampHeader is the header carrying the signing time in unix
	// seconds; when set, the template must sign {timestamp} and requests
	// outside Options.Tolerance are rejected. Defaults to none: no
	// timestamp, no replay window.
	TimestampHeader string
	// Template is the signed content. Placeholders: {body} (the raw body;
	// required), {timestamp} (TimestampHeader's value as sent), {url} (the
	// request URL, see Options.PublicBaseURL), {method} and {header:Name}
	// (that header's value; a request without it is rejected). Everything
	// else is literal, and "{" always starts a placeholder. Defaults to
	// "{body}".
	Template string
	// Events names where the provider puts the event id and type, reported
	// through EventLocation. Defaults to nowhere, leaving the inbox to its
	// own defaults. Its SignedHeaders is ignored: the verifier reports the
	// headers its Template and TimestampHeader cover.
	Events EventLocation
}

// HMAC verifies a configurable HMAC scheme: the signature header holds
// Prefix followed by the encoded HMAC of Template, keyed by the secret
// string's bytes. NewGitHub, NewShopify and NewSlack are presets of it.
type HMAC struct {
	secrets   SecretSource
	opts      *Options
	cfg       HMACConfig
	sigNames  []string // SignatureHeader, then AltSignatureHeaders
	newHash   func() hash.Hash
	template  []templatePart
	signsTime bool
	work      *workCounter
}

// NewHMAC returns a verifier for the scheme cfg describes, with the given
// secrets and options (nil for the defaults), or an error naming what in
// cfg is wrong.
func NewHMAC(secrets SecretSource, cfg HMACConfig, opts *Options) (*HMAC, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, fmt.Errorf("signature: HMACConfig: %w", err)
	}
	newHash, err := cfg.Algorithm.newHash()
	if err != nil {
		return nil, fmt.Errorf("signature: HMACConfig: %w", err)
	}
	template, err := compileTemplate(cfg.Template)
	if err != nil {
		return nil, fmt.Errorf("signature: HMACConfig.Template: %w", err)
	}
	// The caller keeps its slices; the verifier's must not change under it.
	cfg.AltSignatureHeaders = slices.Clone(cfg.AltSignatureHeaders)
	cfg.Events = cfg.Events.clone()
	h := &HMAC{secrets: secrets, opts: opts, cfg: cfg, sigNames: cfg.signatureHeaders(), newHash: newHash, template: template}
	var signsBody bool
	for _, p := range template {
		signsBody = signsBody || p.kind == partBody
		h.signsTime = h.signsTime || p.kind == partTimestamp
	}
	switch {
	case !signsBody:
		return nil, errors.New("signature: HMACConfig.Template must sign {body}")
	case h.signsTime && cfg.TimestampHeader == "":
		return nil, errors.New("signature: HMACConfig.Template signs {timestamp} but TimestampHeader is empty")
	case !h.signsTime && cfg.TimestampHeader != "":
		// Checking a timestamp nobody signed would stop nothing.
		return nil, errors.New("signature: HMACConfig.TimestampHeader is set but Template does not sign {timestamp}")
	}
	return h, nil
}

// mustHMAC builds one of the package's presets, whose configurations are
// fixed and tested.
func mustHMAC(secrets SecretSource, cfg HMACConfig, opts *Options) *HMAC {
	h, err := NewHMAC(secrets, cfg, opts)
	if err != nil {
		panic(err)
	}
	return h
}

func (c *HMACConfig) applyDefaults() error {
	if c.SignatureHeader == "" {
		return errors.New("SignatureHeader is required")
	}
	if len(c.signatureHeaders()) != 1+len(c.AltSignatureHeaders) {
		return errors.New("AltSignatureHeaders must be distinct non-empty names other than SignatureHeader")
	}
	if c.Algorithm == "" {
		c.Algorithm = SHA256
	}
	if c.Encoding == "" {
		c.Encoding = Hex
	}
	if !c.Encoding.valid() {
		return fmt.Errorf("unknown encoding %q", string(c.Encoding))
	}
	if c.Template == "" {
		c.Template = "{body}"
	}
	return nil
}

// signatureHeaders returns SignatureHeader then AltSignatureHeaders, without
// blanks or repeats.
func (c *HMACConfig) signatureHeaders() []string {
	return headerList(append([]string{c.SignatureHeader}, c.AltSignatureHeaders...))
}

// EventLocation reports the configuration's Events, with SignedHeaders the
// headers that Template signs ({header:Name}, and TimestampHeader through
// {timestamp}).
func (h *HMAC) EventLocation() EventLocation {
	loc := h.cfg.Events.clone()
	loc.SignedHeaders = nil
	if h.cfg.TimestampHeader != "" {
		loc.SignedHeaders = append(loc.SignedHeaders, h.cfg.TimestampHeader)
	}
	for _, p := range h.template {
		if p.kind == partHeader {
			loc.SignedHeaders = append(loc.SignedHeaders, p.header)
		}
	}
	return loc
}

// Verify checks r's signature. See the package documentation for errors.
func (h *HMAC) Verify(ctx context.Context, r *Request) error {
	name, raw, err := agreeingSignatureHeader(r.Header, h.sigNames)
	if err != nil {
		return err
	}
	encoded, ok := strings.CutPrefix(raw, h.cfg.Prefix)
	if !ok {
		return malformed(name, fmt.Sprintf("does not start with %q", h.cfg.Prefix))
	}
	sig, err := h.cfg.Encoding.decode(strings.TrimSpace(encoded))
	if err != nil {
		return malformed(name, err.Error())
	}
	var timestamp string
	var signedAt int64
	if h.signsTime {
		if timestamp, err = header(r.Header, h.cfg.TimestampHeader); err != nil {
			return err
		}
		if signedAt, err = parseUnix(timestamp); err != nil {
			return malformed(h.cfg.TimestampHeader, "timestamp is "+err.Error())
		}
	}
	content, err := h.content(r, timestamp)
	if err != nil {
		return err
	}
	if h.signsTime {
		if err := h.opts.checkTimestamp(signedAt); err != nil {
			return err
		}
	}
	keys, err := rawKeys(ctx, h.secrets)
	if err != nil {
		return err
	}
	return matchMAC(h.work, h.newHash, keys, [][]byte{sig}, content)
}

// content fills the template for r.
func (h *HMAC) content(r *Request, timestamp string) ([][]byte, error) {
	content := make([][]byte, len(h.template))
	for i, p := range h.template {
		switch p.kind {
		case partLiteral:
			content[i] = p.literal
		case partBody:
			content[i] = r.Body
		case partTimestamp:
			content[i] = []byte(timestamp)
		case partMethod:
			content[i] = []byte(r.Method)
		case partURL:
			u, err := h.opts.signedURL(r)
			if err != nil {
				return nil, err
			}
			content[i] = []byte(u)
		case partHeader:
			v, err := header(r.Header, p.header)
			if err != nil {
				return nil, err
			}
			content[i] = []byte(v)
		}
	}
	return content, nil
}

type partKind int

const (
	partLiteral partKind = iota
	partBody
	partTimestamp
	partURL
	partMethod
	partHeader
)

// templatePart is a literal run or a placeholder of a signed-content
// template.
type templatePart struct {
	kind    partKind
	literal []byte // partLiteral
	header  string // partHeader
}

var placeholders = map[string]partKind{
	"body":      partBody,
	"timestamp": partTimestamp,
	"url":       partURL,
	"method":    partMethod,
}

// compileTemplate splits t into literals and placeholders.
func compileTemplate(t string) ([]templatePart, error) {
	var parts []templatePart
	for pos := 0; pos < len(t); {
		open := strings.IndexByte(t[pos:], '{')
		if open < 0 {
			parts = append(parts, templatePart{kind: partLiteral, literal: []byte(t[pos:])})
			break
		}
		open += pos
		if open > pos {
			parts = append(parts, templatePart{kind: partLiteral, literal: []byte(t[pos:open])})
		}
		closing := strings.IndexByte(t[open:], '}')
		if closing < 0 {
			return nil, fmt.Errorf("unclosed placeholder at byte %d", open)
		}
		closing += open
		name := t[open+1 : closing]
		if headerName, ok := strings.CutPrefix(name, "header:"); ok && headerName != "" {
			parts = append(parts, templatePart{kind: partHeader, header: headerName})
		} else if kind, ok := placeholders[name]; ok {
			parts = append(parts, templatePart{kind: kind})
		} else {
			return nil, fmt.Errorf("unknown placeholder {%s}", name)
		}
		pos = closing + 1
	}
	return parts, nil
}
