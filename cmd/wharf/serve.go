package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"riverqueue.com/riverui"

	"github.com/wharfhq/wharf/dashboard"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
)

// riverUIPrefix is where wharf serve mounts riverui.
const riverUIPrefix = "/riverui"

// The environment variables that turn on the dashboard's authentication.
const (
	envServeToken = "WHARF_SERVE_TOKEN"      // Authorization: Bearer <token>
	envServeBasic = "WHARF_SERVE_BASIC_AUTH" // user:password, for a browser's basic auth prompt
)

func runServe(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "serve", "")
	addr := fs.String("addr", "127.0.0.1:8081", "listen address; binding beyond loopback needs $"+envServeToken+" or $"+envServeBasic)
	readOnly := fs.Bool("read-only", false, "serve the pages without any action (replay, skip, enable, disable, rotate)")
	noAuth := fs.Bool("insecure-no-auth", false, "allow a non-loopback address without authentication (behind an authenticating proxy)")
	fs.Usage = func() {
		fmt.Fprintf(e.errOut, "usage: wharf serve [-addr 127.0.0.1:8081] [-read-only]\n\n"+
			"Serves the dashboard at /, riverui at /riverui (not with -read-only), Prometheus metrics at /metrics\n"+
			"and a health check at /healthz.\n"+
			"Authentication: $%s (bearer token) and/or $%s (user:password); /healthz needs none.\n"+
			"Endpoint secrets rotated from the dashboard are sealed with $%s's current key, when set.\n\n", envServeToken, envServeBasic, envSecretKeys)
		fs.PrintDefaults()
	}
	if rest, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", rest[0])}
	}
	auth, err := serveAuth(os.Getenv(envServeToken), os.Getenv(envServeBasic))
	if err != nil {
		return usageError{err.Error()}
	}
	if auth == nil && !*noAuth && !loopback(*addr) {
		return usageError{fmt.Sprintf("-addr %s is not a loopback address: set $%s or $%s, or pass -insecure-no-auth behind a proxy that authenticates", *addr, envServeToken, envServeBasic)}
	}
	keys, err := secretKeys() // the dashboard rotates secrets
	if err != nil {
		return err
	}
	pool, err := e.connect(ctx)
	if err != nil {
		return err
	}

	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	logger := slog.New(slog.NewTextHandler(e.errOut, nil))
	// The components report the database's gauges (dead messages, lag,
	// pending and dead deliveries, oldest unfinished row) when scraped.
	ib, err := inbox.New(pool, &inbox.Config{MeterProvider: mp, Logger: logger})
	if err != nil {
		return err
	}
	ob, err := outbox.New(pool, &outbox.Config{MeterProvider: mp, Logger: logger, SecretKeys: keys})
	if err != nil {
		return err
	}
	maint, err := serveMaintainer(ctx, pool, mp, logger)
	if err != nil {
		return err
	}
	// riverui at /riverui, over an insert-only River client (no queues,
	// no workers): a message's page links to its River job there.
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return err
	}
	riverUI, err := riverui.NewHandler(&riverui.HandlerOpts{Endpoints: riverui.NewEndpoints(riverClient, nil),
		Logger: logger, Prefix: riverUIPrefix})
	if err != nil {
		return fmt.Errorf("riverui: %w", err)
	}
	if err := riverUI.Start(ctx); err != nil {
		return fmt.Errorf("riverui: %w", err)
	}
	dash, err := dashboard.New(pool, &dashboard.Config{Inbox: ib, Outbox: ob, Maintainer: maint, ReadOnly: *readOnly,
		Logger: logger, RiverUIPrefix: riverUIPrefix})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	protect := auth.wrap
	if auth == nil && loopback(*addr) {
		// Without credentials, loopback is the only protection: refuse a
		// Host that is not loopback too, or a page of another site whose
		// name resolves to 127.0.0.1 (DNS rebinding) would be same-origin.
		protect = loopbackHostOnly
	}
	mux.Handle("/", protect(dash))
	// riverui's own API takes POSTs (cancel, retry): refused from other
	// origins as the dashboard's are; -read-only leaves riverui out.
	if !*readOnly {
		mux.Handle(riverUIPrefix+"/", protect(http.NewCrossOriginProtection().Handler(riverUI)))
	}
	mux.Handle("GET /metrics", protect(promhttp.HandlerFor(registry, promhttp.HandlerOpts{})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	fmt.Fprintf(e.out, "serving the dashboard on http://%s/ (metrics at /metrics, health at /healthz)\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveMaintainer returns the maintainer behind the partitions page and the
// retention metrics: by the application's recorded retention, or the
// defaults (said in the log) when none is recorded yet.
func serveMaintainer(ctx context.Context, pool *pgxpool.Pool, mp *sdkmetric.MeterProvider, logger *slog.Logger) (*jobs.Maintainer, error) {
	cfg := jobs.Config{}
	switch rec, err := jobs.ReadRetention(ctx, pool); {
	case errors.Is(err, jobs.ErrNoRetentionRecord):
		logger.WarnContext(ctx, "wharf serve: no retention settings recorded yet (the application's periodic jobs record them): the partitions page shows the default retention")
	case err != nil:
		return nil, err
	default:
		cfg = rec.Config
	}
	cfg.MeterProvider, cfg.Logger = mp, logger
	return jobs.NewMaintainer(pool, &cfg)
}

// loopback reports whether a listen address binds only loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHostOnly answers 421 to a request whose Host header does not
// name loopback (localhost, 127.0.0.1, [::1], any port).
func loopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "this dashboard answers loopback names only (localhost, 127.0.0.1)", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveAuthn holds the accepted credentials, hashed so that comparing
// them takes the same time whatever their length. Nil accepts everyone.
type serveAuthn struct {
	token       *[32]byte
	user, basic *[32]byte
}

func serveAuth(token, basic string) (*serveAuthn, error) {
	if token == "" && basic == "" {
		return nil, nil
	}
	a := &serveAuthn{}
	if token != "" {
		h := sha256.Sum256([]byte(token))
		a.token = &h
	}
	if basic != "" {
		user, pass, ok := strings.Cut(basic, ":")
		if !ok || user == "" || pass == "" {
			return nil, fmt.Errorf("$%s must be user:password", envServeBasic)
		}
		u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
		a.user, a.basic = &u, &p
	}
	return a, nil
}

func (a *serveAuthn) wrap(next http.Handler) http.Handler {
	if a == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.allows(r) {
			next.ServeHTTP(w, r)
			return
		}
		if a.basic != nil {
			w.Header().Set("WWW-Authenticate", `Basic realm="wharf", charset="UTF-8"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="wharf"`)
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
}

func (a *serveAuthn) allows(r *http.Request) bool {
	if a.token != nil {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			h := sha256.Sum256([]byte(tok))
			if subtle.ConstantTimeCompare(h[:], a.token[:]) == 1 {
				return true
			}
		}
	}
	if a.basic != nil {
		if user, pass, ok := r.BasicAuth(); ok {
			u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
			return subtle.ConstantTimeCompare(u[:], a.user[:])&subtle.ConstantTimeCompare(p[:], a.basic[:]) == 1
		}
	}
	return false
}
