package egress

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/wharfhq/wharf/internal/outboxtype"
)

// Token reuse (outbox.OAuth2ClientCredentials documents it).
const (
	// tokenReuseWithoutExpiry is how long a token without expires_in is
	// reused.
	tokenReuseWithoutExpiry = time.Hour
	// maxTokenRefreshMargin caps how long before its expiry a token is
	// replaced.
	maxTokenRefreshMargin = time.Minute
	// maxCachedTokens is the size above which entries of tokens due for
	// refresh are forgotten (those of deleted endpoints among them).
	maxCachedTokens = 1024
)

// ErrTokenFetch is matched (errors.Is) by the error of an attempt that
// failed because no OAuth 2.0 access token could be fetched
// (outbox.ErrTokenFetch).
var ErrTokenFetch = errors.New("outbox: OAuth2 token fetch failed")

// tokenCache holds one OAuth 2.0 access token per endpoint, and fetches
// them one at a time per endpoint: concurrent deliveries to an endpoint
// wait for one fetch instead of each making one.
type tokenCache struct {
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	entries map[uuid.UUID]*cachedToken
}

// cachedToken is an endpoint's token. Its fields other than turn are
// guarded by tokenCache.mu.
type cachedToken struct {
	// fingerprint identifies the credentials the token was fetched with:
	// a change of them (EndpointUpdate) makes a new entry.
	fingerprint [sha256.Size]byte
	// turn is held (a value sent) by the delivery fetching the token.
	turn      chan struct{}
	token     *oauth2.Token
	refreshAt time.Time
}

func newTokenCache(client *http.Client, now func() time.Time) *tokenCache {
	return &tokenCache{client: client, now: now, entries: map[uuid.UUID]*cachedToken{}}
}

// token returns a usable token of the endpoint, fetching one when none is
// cached or the cached one is due for refresh. A failure returns an error
// where errors.Is(err, ErrTokenFetch) is true, which never holds a
// credential.
func (c *tokenCache) token(ctx context.Context, endpointID uuid.UUID, a *outboxtype.Auth) (*oauth2.Token, error) {
	e := c.entry(endpointID, a)
	if tok := c.fresh(e); tok != nil {
		return tok, nil
	}
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for another delivery's fetch: %w", ErrTokenFetch, ctx.Err())
	}
	defer func() { <-e.turn }()
	if tok := c.fresh(e); tok != nil {
		return tok, nil // fetched while this delivery waited
	}
	tok, err := c.fetch(ctx, a)
	if err != nil {
		return nil, err
	}
	lifetime := tokenReuseWithoutExpiry
	if !tok.Expiry.IsZero() {
		lifetime = time.Until(tok.Expiry)
	}
	lifetime -= min(lifetime/10, maxTokenRefreshMargin)
	c.mu.Lock()
	e.token, e.refreshAt = tok, c.now().Add(lifetime)
	c.mu.Unlock()
	return tok, nil
}

// entry returns the endpoint's entry for credentials a, replacing one made
// for other credentials.
func (c *tokenCache) entry(endpointID uuid.UUID, a *outboxtype.Auth) *cachedToken {
	fingerprint := a.Fingerprint()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[endpointID]; ok && e.fingerprint == fingerprint {
		return e
	}
	if len(c.entries) >= maxCachedTokens {
		now := c.now()
		for id, e := range c.entries {
			if !now.Before(e.refreshAt) {
				delete(c.entries, id)
			}
		}
	}
	e := &cachedToken{fingerprint: fingerprint, turn: make(chan struct{}, 1)}
	c.entries[endpointID] = e
	return e
}

// fresh returns e's token when it is not yet due for refresh.
func (c *tokenCache) fresh(e *cachedToken) *oauth2.Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.token != nil && c.now().Before(e.refreshAt) {
		return e.token
	}
	return nil
}

// forget drops the endpoint's token if it is tok: the endpoint refused it.
func (c *tokenCache) forget(endpointID uuid.UUID, tok *oauth2.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[endpointID]; ok && e.token == tok {
		e.token = nil
	}
}

// fetch makes one token request with the Client's HTTP client (SSRF
// guard, proxy, transport, no redirects).
func (c *tokenCache) fetch(ctx context.Context, a *outboxtype.Auth) (*oauth2.Token, error) {
	conf := &clientcredentials.Config{
		ClientID:     a.ClientID,
		ClientSecret: a.ClientSecret,
		TokenURL:     a.TokenURL,
		Scopes:       a.Scopes,
		AuthStyle:    oauth2.AuthStyleInHeader,
	}
	if a.CredentialsInBody {
		conf.AuthStyle = oauth2.AuthStyleInParams
	}
	tok, err := conf.Token(context.WithValue(ctx, oauth2.HTTPClient, c.client))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenFetch, tokenError(err))
	}
	return tok, nil
}

// tokenError describes a failed token request without the token URL (its
// query may hold a secret), the response body or any credential; a
// transport error keeps its chain (ErrBlockedAddress, a timeout).
func tokenError(err error) error {
	var retrieve *oauth2.RetrieveError
	var urlErr *url.Error
	switch {
	case errors.As(err, &retrieve):
		msg := "the token endpoint answered"
		if retrieve.Response != nil {
			msg += fmt.Sprintf(" %d", retrieve.Response.StatusCode)
			if loc := retrieve.Response.StatusCode; loc >= 300 && loc < 400 {
				msg += " (redirects are not followed)"
			}
		}
		if code := oauthErrorCode(retrieve.ErrorCode); code != "" {
			msg += " with error " + code
		}
		return errors.New(msg)
	case errors.As(err, &urlErr):
		return urlErr.Err
	}
	return err
}

// oauthErrorCode returns an RFC 6749 error code fit to quote (a short
// token of letters, digits and underscores), otherwise "".
func oauthErrorCode(code string) string {
	if code == "" || len(code) > 64 {
		return ""
	}
	for _, r := range code {
		if !(r == '_' || r == '-' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')) {
			return ""
		}
	}
	return code
}
