package podstreams

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
)

// TestTunnel: a syncer's tunnel carries kcp's requests for its pods'
// streams to its cluster, refuses anything else, and a new tunnel of the
// same target replaces the old one, whose streams end.
func TestTunnel(t *testing.T) {
	key := workload.TargetKey("root:compute", "pc1")
	reached := make(chan string, 100)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/api/v1/namespaces/kcp-a":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kcp-a","labels":{%q:%q}}}`, syncer.TargetLabel, key)
		case "/api/v1/namespaces/kcp-a/pods/web/log":
			w.(http.Flusher).Flush()
			fmt.Fprint(w, "hello\n")
			w.(http.Flusher).Flush()
			if r.URL.Query().Get("follow") == "true" {
				<-r.Context().Done()
			}
		default:
			http.Error(w, "not here", http.StatusNotFound)
		}
	}))
	defer down.Close()

	s := &Streams{limits: DefaultLimits, tunnels: map[string]*yamux.Session{}, direct: map[string]*rest.Config{}, openWS: map[logicalcluster.Name]int{}, openTarget: map[string]int{}}
	authn := authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "syncer-pc1"}}, true, nil
	})
	authz := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetName() == "pc1" && a.GetVerb() == workload.VerbSync {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "", nil
	})
	kcp := httptest.NewServer(s.WithTunnels(http.NotFoundHandler(), authn, authz))
	defer kcp.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := &rest.Config{Host: kcp.URL + "/clusters/root:compute", BearerToken: "syncer-token"}
	go syncer.RunTunnel(ctx, up, "pc1", &rest.Config{Host: down.URL, BearerToken: "downstream-token"})
	tg := target{Key: key, Location: "root:compute", Name: "pc1", Namespace: "kcp-a"}
	var base string
	var rt http.RoundTripper
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if base, rt, _, err = s.dialer(tg); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tunnel: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	client := &http.Client{Transport: rt}
	get := func(path string) (int, string) {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/api/v1/namespaces/kcp-a/pods/web/log"); code != 200 || body != "hello\n" {
		t.Errorf("logs through the tunnel: %d %q", code, body)
	}
	for _, p := range []string{"/api/v1/secrets", "/api/v1/namespaces/kcp-a/pods/web", "/api/v1/namespaces/other/pods/web/log"} {
		if code, body := get(p); code != http.StatusForbidden {
			t.Errorf("%s through the tunnel: %d %q", p, code, body)
		}
	}
	// What reached the physical cluster: the namespace checks and the
	// log, with the syncer's own credentials only.
	for len(reached) > 0 {
		switch r := <-reached; r {
		case "GET /api/v1/namespaces/kcp-a Bearer downstream-token", "GET /api/v1/namespaces/kcp-a/pods/web/log Bearer downstream-token",
			"GET /api/v1/namespaces/other Bearer downstream-token":
		default:
			t.Errorf("reached the physical cluster: %s", r)
		}
	}

	// logs -f open; the syncer reconnects (a second tunnel of the same
	// target): the open stream ends, new ones use the new tunnel.
	resp, err := client.Get(base + "/api/v1/namespaces/kcp-a/pods/web/log?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "hello\n" {
		t.Fatalf("follow: %q %v", first, err)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); ended <- err }()
	s.mu.Lock()
	old := s.tunnels[key]
	s.mu.Unlock()
	go syncer.RunTunnel(ctx, up, "pc1", &rest.Config{Host: down.URL, BearerToken: "downstream-token"})
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream of the replaced tunnel did not end")
	}
	<-old.CloseChan()
	if base, rt, _, err = s.dialer(tg); err != nil {
		t.Fatal(err)
	}
	client = &http.Client{Transport: rt}
	if code, body := get("/api/v1/namespaces/kcp-a/pods/web/log"); code != 200 || body != "hello\n" {
		t.Errorf("logs through the new tunnel: %d %q", code, body)
	}
}
