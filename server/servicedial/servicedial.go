// Package servicedial connects kcp to a port of a Service of a workspace,
// for the webhooks (admission webhooks, CRD conversion webhooks) whose
// clientConfig.service names it. A workspace's Services and pods run on
// the physical clusters its namespace is placed on, so the connection goes
// to one of them: through the SyncTarget's syncer tunnel in pull mode
// (server/podstreams keeps the tunnels), from kcp with its own
// configuration of the cluster in push mode. Either way the syncer's code
// (syncer.ServiceEndpoints) picks a ready endpoint that the physical
// cluster's endpointslice controller found for the Service's own pods in
// the namespace the syncer made for this workspace's namespace; no address
// a tenant wrote is ever dialed.
//
// The workspace is always the one of the webhook configuration or CRD
// (the upstream reference has only a namespace and a name), and the
// downstream namespace is computed from that workspace's name
// (syncer.DownstreamNamespace), so a reference cannot reach another
// workspace's Service.
package servicedial

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/yamux"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/podstreams"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/syncer"
)

// Connections are the ways kcp reaches physical clusters, by SyncTarget
// key (podstreams.Streams).
type Connections interface {
	Connection(key string) (*yamux.Session, *rest.Config)
}

// Dialer dials Services of workspaces. One per server.
type Dialer struct {
	conns Connections

	mu      sync.Mutex
	clients *clusterinformer.Clients
	// push are clients of push-mode targets' clusters, by key, with the
	// configuration they were made from.
	push map[string]pushClient
}

type pushClient struct {
	cfg    *rest.Config
	client kubernetes.Interface
}

// Shared is the server's Dialer.
var Shared = New(podstreams.Shared)

// New returns a Dialer reaching physical clusters through conns.
func New(conns Connections) *Dialer {
	return &Dialer{conns: conns, push: map[string]pushClient{}}
}

// SetUp gives the Dialer the loopback configuration it reads namespaces
// with.
func (d *Dialer) SetUp(loopback *rest.Config) error {
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clients = clients
	return nil
}

// target is one SyncTarget a namespace is placed on.
type target struct {
	key, location, name string
	// runsPods: the target runs the namespace's pods created directly
	// (Deployments' pods run on every target).
	runsPods, leaving bool
}

func (t target) String() string { return "SyncTarget " + t.name + " in " + t.location }

var podsResource = schema.GroupResource{Resource: "pods"}

// targets are the SyncTargets a namespace of a workspace is placed on, the
// likeliest to run the Service's pods first.
func (d *Dialer) targets(ctx context.Context, cluster logicalcluster.Name, namespace string) ([]target, error) {
	d.mu.Lock()
	clients := d.clients
	d.mu.Unlock()
	if clients == nil {
		return nil, fmt.Errorf("kcp is not ready to call Services yet")
	}
	core, err := clients.Core(cluster)
	if err != nil {
		return nil, err
	}
	ns, err := core.Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the workspace has no namespace %s", namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading namespace %s: %v", namespace, err)
	}
	pol, _ := workload.ParsePolicy(ns.Annotations)
	var out []target
	for _, a := range workload.AssignedTargets(ns.Labels, ns.Annotations) {
		t := target{key: a.Key, location: a.Location, name: a.Name, runsPods: pol.Runs(podsResource, a.Key)}
		if pol != nil {
			t.leaving = pol.Targets[a.Key].Leaving
		}
		out = append(out, t)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.leaving != b.leaving {
			return !a.leaving
		}
		if a.runsPods != b.runsPods {
			return a.runsPods
		}
		return a.key < b.key
	})
	return out, nil
}

// ServicePlaced reports whether a namespace of a workspace is placed on a
// SyncTarget (so that its Services can be called).
func (d *Dialer) ServicePlaced(ctx context.Context, cluster logicalcluster.Name, namespace string) (bool, error) {
	ts, err := d.targets(ctx, cluster, namespace)
	if err != nil {
		return false, err
	}
	return len(ts) > 0, nil
}

// DialService connects to port of Service namespace/name of a workspace:
// to a ready endpoint of its pods on one of the physical clusters its
// namespace is placed on (each tried in turn). The error names the
// Service and, for each SyncTarget, why it could not be reached there.
func (d *Dialer) DialService(ctx context.Context, cluster logicalcluster.Name, namespace, name string, port int32) (net.Conn, error) {
	what := fmt.Sprintf("Service %s/%s (port %d) of workspace %s", namespace, name, port, cluster)
	if cluster == "" || cluster.IsWildcard() {
		return nil, fmt.Errorf("%s: no workspace to call it in", what)
	}
	ts, err := d.targets(ctx, cluster, namespace)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("%s: namespace %s is not placed on any SyncTarget, so no physical cluster runs the Service's pods", what, namespace)
	}
	downstream := syncer.DownstreamNamespace(cluster, namespace)
	var errs []string
	for _, t := range ts {
		conn, err := d.dial(ctx, t, downstream, name, port)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, fmt.Sprintf("on %s: %v", t, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%s: %s", what, strings.Join(errs, "; "))
}

// dial reaches the Service on one target.
func (d *Dialer) dial(ctx context.Context, t target, namespace, name string, port int32) (net.Conn, error) {
	session, direct := d.conns.Connection(t.key)
	switch {
	case direct != nil:
		client, err := d.pushClient(t.key, direct)
		if err != nil {
			return nil, err
		}
		return syncer.ServiceEndpoints{Client: client, Key: t.key}.DialService(ctx, namespace, name, port)
	case session != nil:
		stream, err := session.Open()
		if err != nil {
			return nil, fmt.Errorf("the syncer's tunnel closed: %v", err)
		}
		return syncer.DialThroughTunnel(ctx, stream, namespace, name, port)
	}
	return nil, fmt.Errorf("its syncer has no tunnel open to kcp (is it running, and can it reach kcp?)")
}

// pushClient is a client of a push-mode target's cluster, made once per
// configuration.
func (d *Dialer) pushClient(key string, cfg *rest.Config) (kubernetes.Interface, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.push[key]; ok && c.cfg == cfg {
		return c.client, nil
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	d.push[key] = pushClient{cfg: cfg, client: client}
	return client, nil
}
