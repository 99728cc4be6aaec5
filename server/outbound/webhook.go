package outbound

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/server/tenantslots"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// maxAnswer bounds what is read of a webhook's answer before deciding
// whether to pass it on; upstream's request limit for a whole object list.
const maxAnswer = 64 << 20

// ServiceDialer connects to a port of a Service of a logical cluster,
// wherever its pods run (server/servicedial).
type ServiceDialer interface {
	DialService(ctx context.Context, cluster logicalcluster.Name, namespace, name string, port int32) (net.Conn, error)
	// ServicePlaced reports whether a namespace's Services run anywhere
	// (the namespace is placed on a physical cluster).
	ServicePlaced(ctx context.Context, cluster logicalcluster.Name, namespace string) (bool, error)
}

// AuthResolverWrapper replaces upstream's webhook credential resolver for
// webhooks not of one logical cluster (CRDs served across clusters or
// through an API export): URLs as AuthResolverWrapperFor, and service
// references are refused (there is no one workspace to find the Service
// in).
func (p *Policy) AuthResolverWrapper() webhook.AuthenticationInfoResolverWrapper {
	return p.AuthResolverWrapperFor("")
}

// AuthResolverWrapperFor replaces upstream's webhook credential resolver
// for the webhooks of one logical cluster. Upstream gives a webhook at
// kubernetes.default.svc the server's loopback credentials and resolves
// service references through the host's DNS; here every URL gets an
// empty client config (no credentials, the policy's dialer, no proxy), and
// a service reference is a connection made by p.Services to the Service
// of that name in the cluster (its pods on a physical cluster), whatever
// address upstream's resolver gave: the TLS on it is verified by upstream
// against the webhook's caBundle for <service>.<namespace>.svc.
func (p *Policy) AuthResolverWrapperFor(cluster logicalcluster.Name) webhook.AuthenticationInfoResolverWrapper {
	return func(webhook.AuthenticationInfoResolver) webhook.AuthenticationInfoResolver {
		return &webhook.AuthenticationInfoResolverDelegator{
			ClientConfigForFunc: func(hostPort string) (*rest.Config, error) {
				cfg := &rest.Config{Dial: p.DialContext, Proxy: NoProxy}
				cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return quietAnswers{rt} })
				return cfg, nil
			},
			ClientConfigForServiceFunc: func(name, namespace string, port int) (*rest.Config, error) {
				services := p.services()
				if services == nil || cluster == "" || cluster.IsWildcard() {
					return nil, fmt.Errorf("webhook service reference %s/%s:%d: %w (kcp calls a webhook served by a Service only for the webhook configurations and CRDs of the Service's own workspace; give the webhook a url)", namespace, name, port, ErrNotAllowed)
				}
				host := net.JoinHostPort(name+"."+namespace+".svc", strconv.Itoa(port))
				cfg := &rest.Config{Proxy: NoProxy, Dial: func(ctx context.Context, _, addr string) (net.Conn, error) {
					if addr != host {
						// Upstream resolves the reference to this name;
						// anything else is not the Service.
						return nil, fmt.Errorf("webhook service reference %s/%s:%d: %w: %s", namespace, name, port, ErrNotAllowed, addr)
					}
					return services.DialService(ctx, cluster, namespace, name, int32(port))
				}}
				cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return quietAnswers{rt} })
				return cfg, nil
			},
		}
	}
}

func (p *Policy) services() ServiceDialer {
	if p == nil {
		return nil
	}
	return p.Services
}

// quietAnswers keeps a webhook's answer from reaching the tenant unless it
// is what a webhook answers: a JSON review object with a 2xx status. Anything
// else (an internal service's page, an error text) becomes an empty answer
// with the same status, so error messages say only the status code.
type quietAnswers struct{ next http.RoundTripper }

func (q quietAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	// The tenant's request waiting for its webhook holds none of the
	// tenant's execution slots meanwhile (tenantslots).
	defer tenantslots.Yield(req.Context())()
	resp, err := q.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return silence(resp, resp.StatusCode), nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the webhook's answer: %v", err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if len(body) > maxAnswer || json.Unmarshal(body, &head) != nil || head.APIVersion == "" ||
		(head.Kind != "ConversionReview" && head.Kind != "AdmissionReview") {
		// 502: the webhook answered, but not as a webhook.
		return silence(resp, http.StatusBadGateway), nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

func silence(resp *http.Response, code int) *http.Response {
	if resp.Body != nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	resp.StatusCode = code
	resp.Status = strconv.Itoa(code) + " " + http.StatusText(code)
	resp.Header = http.Header{"Content-Type": {"text/plain"}}
	resp.Body = io.NopCloser(bytes.NewReader(nil))
	resp.ContentLength = 0
	return resp
}
