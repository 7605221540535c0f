package testdb

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of Postgres that a test can cut, to see
// what happens when the database becomes unreachable mid-flight.
type Proxy struct {
	listener net.Listener
	target   string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy on loopback forwarding to the host:port of
// databaseURL, and returns it with databaseURL rewritten to go through it.
// It stops when the test ends.
func NewProxy(tb testing.TB, databaseURL string) (*Proxy, string) {
	tb.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		tb.Fatalf("testdb: parse URL: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testdb: proxy listen: %v", err)
	}
	p := &Proxy{listener: ln, target: u.Host, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.serve()
	tb.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

// SetDown cuts every open connection and refuses new ones while down is
// true; false lets connections through again.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = client.Close()
			continue
		}
		p.mu.Unlock()
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.down { // cut while dialing: this one must not survive the cut
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			continue
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(client, server)
		go p.pipe(server, client)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, err := io.Copy(dst, src)
	_ = err // a cut connection ends the copy; both sides are closed below
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.listener.Close()
	p.SetDown(true)
	p.wg.Wait()
}
