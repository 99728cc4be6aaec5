package clusterinformer

import (
	"context"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// Clients builds the API clients of one logical cluster at a time over one
// shared HTTP client. Controllers that act in whichever cluster an event came
// from need a client per call; a whole kubernetes.Clientset (every API group)
// per call was measurable in the CPU profile of workspace creation.
type Clients struct {
	loopback *rest.Config
	http     *http.Client
}

// NewClients returns Clients for the server behind loopback.
func NewClients(loopback *rest.Config) (*Clients, error) {
	hc, err := rest.HTTPClientFor(loopback)
	if err != nil {
		return nil, err
	}
	return &Clients{loopback: loopback, http: hc}, nil
}

// Kubernetes is the whole typed client set of cluster, for code that
// takes a kubernetes.Interface (upstream's admission plugins and APF).
func (c *Clients) Kubernetes(cluster logicalcluster.Name) (kubernetes.Interface, error) {
	return kubernetes.NewForConfigAndClient(ForCluster(c.loopback, cluster), c.http)
}

// Core is the core/v1 client of cluster.
func (c *Clients) Core(cluster logicalcluster.Name) (corev1client.CoreV1Interface, error) {
	return corev1client.NewForConfigAndClient(ForCluster(c.loopback, cluster), c.http)
}

// RBAC is the rbac.authorization.k8s.io/v1 client of cluster.
func (c *Clients) RBAC(cluster logicalcluster.Name) (rbacv1client.RbacV1Interface, error) {
	return rbacv1client.NewForConfigAndClient(ForCluster(c.loopback, cluster), c.http)
}

// Dynamic is the dynamic client of cluster.
func (c *Clients) Dynamic(cluster logicalcluster.Name) (dynamic.Interface, error) {
	return dynamic.NewForConfigAndClient(ForCluster(c.loopback, cluster), c.http)
}

// UpdateStatus writes obj's status in cluster and takes the stored
// resourceVersion into obj, so that the next write of the same object
// does not conflict with this one.
func (c *Clients) UpdateStatus(ctx context.Context, cluster logicalcluster.Name, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	d, err := c.Dynamic(cluster)
	if err != nil {
		return err
	}
	updated, err := d.Resource(gvr).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	obj.SetResourceVersion(updated.GetResourceVersion())
	return nil
}

// Metadata is the metadata-only client of cluster.
func (c *Clients) Metadata(cluster logicalcluster.Name) (metadata.Interface, error) {
	return metadata.NewForConfigAndClient(ForCluster(c.loopback, cluster), c.http)
}

// Discovery is the discovery client of cluster.
func (c *Clients) Discovery(cluster logicalcluster.Name) (discovery.DiscoveryInterface, error) {
	return discovery.NewDiscoveryClientForConfigAndClient(ForCluster(c.loopback, cluster), c.http)
}

// Admissionregistration is the admissionregistration.k8s.io/v1 client of
// cluster.
func (c *Clients) Admissionregistration(cluster logicalcluster.Name) (admissionregistrationv1client.AdmissionregistrationV1Interface, error) {
	return admissionregistrationv1client.NewForConfigAndClient(ForCluster(c.loopback, cluster), c.http)
}

// HTTP is the shared HTTP client, for clients of other API groups (built
// with NewForConfigAndClient and ForCluster): a client built with
// NewForConfig instead gets a transport of its own per call, and with it
// a new loopback connection whose goroutines live until it idles out.
func (c *Clients) HTTP() *http.Client { return c.http }
