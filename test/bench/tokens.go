package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var (
	tokensOnly      = flag.Bool("tokens", false, "only measure the workspace tokens of synced pods: TokenRequests per second (what a syncer asks for each ServiceAccount of the pods it runs, once per 48 minutes), and requests per second of pods presenting them without a /clusters/ path (first use and again), with the server's live heap")
	tokenCount      = flag.Int("token-count", 10000, "tokens to issue for -tokens")
	tokenWorkspaces = flag.Int("token-workspaces", 100, "workspaces (one ServiceAccount each) the tokens of -tokens are spread over")
)

type tokenPhase struct {
	name     string
	n        int
	took     time.Duration
	p50, p99 time.Duration
}

type tokenResult struct {
	workspaces            int
	phases                []tokenPhase
	heapBefore, heapAfter float64
}

// benchTokens issues -token-count tokens for ServiceAccounts spread over
// -token-workspaces workspaces, then presents each once as a pod's
// in-cluster client would (no /clusters/ path: the token's claim routes
// it), then each again.
func benchTokens(log func(string, ...any)) (tokenResult, error) {
	r := tokenResult{workspaces: *tokenWorkspaces}
	s, stop, err := startInTemp("tokens", "")
	if err != nil {
		return r, err
	}
	defer stop()
	var pairs [][2]string
	for i := range *tokenWorkspaces {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("t-%d", i)})
	}
	log("creating %d workspaces with a ServiceAccount that may list ConfigMaps", len(pairs))
	if err := s.createWorkspaces(pairs); err != nil {
		return r, err
	}
	ctx := context.Background()
	cs := make([]*kubernetes.Clientset, len(pairs))
	for i, p := range pairs {
		if cs[i], err = s.client(p[0] + ":" + p[1]); err != nil {
			return r, err
		}
	}
	if err := parallel(len(cs), func(i int) error {
		c := cs[i]
		if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "operator"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := c.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := c.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "read"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "read"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "operator", Namespace: "default"}}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, err
	}
	time.Sleep(3 * time.Second)
	r.heapBefore = s.liveHeapMiB()

	tokens := make([]string, *tokenCount)
	seconds := int64(3600)
	lat := make([]time.Duration, *tokenCount)
	log("issuing %d tokens", *tokenCount)
	start := time.Now()
	if err := parallel(*tokenCount, func(i int) error {
		t0 := time.Now()
		tr, err := cs[i%len(cs)].CoreV1().ServiceAccounts("default").CreateToken(ctx, "operator",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
		lat[i] = time.Since(t0)
		if err == nil {
			tokens[i] = tr.Status.Token
		}
		return err
	}); err != nil {
		return r, err
	}
	r.phases = append(r.phases, phase("TokenRequest (what the syncer asks)", lat, time.Since(start)))

	cfg, err := s.config("root")
	if err != nil {
		return r, err
	}
	tlsCfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: cfg.TLSClientConfig.CAData}})
	if err != nil {
		return r, err
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: *clients}}
	base := strings.SplitN(cfg.Host, "/clusters/", 2)[0]
	use := func(name string) error {
		lat := make([]time.Duration, len(tokens))
		start := time.Now()
		if err := parallel(len(tokens), func(i int) error {
			req, _ := http.NewRequest("GET", base+"/api/v1/namespaces/default/configmaps?limit=1", nil)
			req.Header.Set("Authorization", "Bearer "+tokens[i])
			t0 := time.Now()
			resp, err := hc.Do(req)
			lat[i] = time.Since(t0)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("a pod's list with its workspace token: %s", resp.Status)
			}
			return nil
		}); err != nil {
			return err
		}
		r.phases = append(r.phases, phase(name, lat, time.Since(start)))
		return nil
	}
	log("presenting each token once, then again")
	if err := use("a pod's list, first use of its token (no /clusters/ path)"); err != nil {
		return r, err
	}
	if err := use("the same, again"); err != nil {
		return r, err
	}
	r.heapAfter = s.liveHeapMiB()
	return r, nil
}

func phase(name string, lat []time.Duration, took time.Duration) tokenPhase {
	sorted := append([]time.Duration{}, lat...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return tokenPhase{name: name, n: len(lat), took: took, p50: sorted[len(sorted)/2], p99: sorted[len(sorted)*99/100]}
}

func renderTokens(r tokenResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| step (%d workspaces, %d clients) | requests | per second | p50 | p99 |\n|---|---|---|---|---|\n", r.workspaces, *clients)
	for _, p := range r.phases {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %s | %s |\n", p.name, p.n, float64(p.n)/p.took.Seconds(), p.p50.Round(10*time.Microsecond), p.p99.Round(10*time.Microsecond))
	}
	fmt.Fprintf(&b, "\nLive heap %.1f MiB before the tokens, %.1f MiB after %d tokens were issued and used twice (%.2f KiB per token).\n",
		r.heapBefore, r.heapAfter, *tokenCount, (r.heapAfter-r.heapBefore)*1024/float64(*tokenCount))
	return b.String()
}
