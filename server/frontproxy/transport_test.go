package frontproxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
)

// TestTransportsByUpgrade: requests and watches reach a shard over HTTP/2
// (many share a connection), upgraded streams over HTTP/1.1, through the
// proxy's ReverseProxy as in ServeHTTP.
func TestTransportsByUpgrade(t *testing.T) {
	shard := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			_, _ = io.WriteString(w, r.Proto)
			return
		}
		if r.ProtoMajor != 1 {
			http.Error(w, "upgrade over "+r.Proto, http.StatusBadRequest)
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test-stream\r\n\r\n")
		_ = buf.Flush()
		line, _ := buf.ReadString('\n')
		_, _ = buf.WriteString("echo " + line)
		_ = buf.Flush()
	}))
	shard.EnableHTTP2 = true
	shard.StartTLS()
	defer shard.Close()
	pool := x509.NewCertPool()
	pool.AddCert(shard.Certificate())
	target, _ := url.Parse(shard.URL)
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: transports(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
	}
	front := httptest.NewServer(rp)
	defer front.Close()

	for _, path := range []string{"/api/v1/namespaces", "/api/v1/namespaces?watch=true"} {
		resp, err := http.Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "HTTP/2.0" {
			t.Errorf("%s reached the shard over %q, want HTTP/2.0", path, body)
		}
	}

	// An upgraded stream (as kubectl exec's) goes over HTTP/1.1 and works
	// both ways.
	conn, err := (&net.Dialer{}).Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /api/v1/namespaces/default/pods/p/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test-stream\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: %s %s", resp.Status, b)
	}
	_, _ = io.WriteString(conn, "hello\n")
	line, err := r.ReadString('\n')
	if err != nil || line != "echo hello\n" {
		t.Fatalf("through the upgraded stream: %q, %v", line, err)
	}
}
