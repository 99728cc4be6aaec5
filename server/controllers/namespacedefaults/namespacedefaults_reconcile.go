package namespacedefaults

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

type reconciler struct {
	caPEM             string
	state             func(logicalcluster.Name) (exists, terminating bool)
	getNamespace      func(context.Context, logicalcluster.Name, string) (*corev1.Namespace, error)
	getServiceAccount func(context.Context, logicalcluster.Name, string) (*corev1.ServiceAccount, error)
	getConfigMap      func(context.Context, logicalcluster.Name, string) (*corev1.ConfigMap, error)
	clientFor         func(logicalcluster.Name) (corev1client.CoreV1Interface, error)
}

func (r *reconciler) reconcile(ctx context.Context, cluster logicalcluster.Name, namespace string) error {
	ns, err := r.getNamespace(ctx, cluster, namespace)
	if err != nil {
		return err
	}
	if ns == nil || ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		return nil
	}
	switch exists, terminating := r.state(cluster); {
	case terminating:
		return nil
	case !exists:
		// The workspace controller creates a cluster's first namespace right
		// after its LogicalCluster; our view of clusters may not have it yet.
		return fmt.Errorf("logical cluster %s is not known yet", cluster)
	}
	var client corev1client.CoreV1Interface
	lazyClient := func() (corev1client.CoreV1Interface, error) {
		if client != nil {
			return client, nil
		}
		c, err := r.clientFor(cluster)
		client = c
		return c, err
	}
	sa, err := r.getServiceAccount(ctx, cluster, namespace)
	if err != nil {
		return err
	}
	if sa == nil {
		c, err := lazyClient()
		if err != nil {
			return err
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultServiceAccount, Namespace: namespace}}
		if _, err := c.ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
			return err
		}
	}
	cm, err := r.getConfigMap(ctx, cluster, namespace)
	if err != nil {
		return err
	}
	switch {
	case cm == nil:
		c, err := lazyClient()
		if err != nil {
			return err
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap, Namespace: namespace}, Data: map[string]string{"ca.crt": r.caPEM}}
		if _, err := c.ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
			return err
		}
	case !holdsOnlyCA(cm.Data, cm.BinaryData, r.caPEM):
		c, err := lazyClient()
		if err != nil {
			return err
		}
		// The cache keeps a trimmed copy: update the stored object, so
		// that its labels and annotations stay.
		fixed, err := c.ConfigMaps(namespace).Get(ctx, RootCAConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		fixed.Data = map[string]string{"ca.crt": r.caPEM}
		fixed.BinaryData = nil
		if _, err := c.ConfigMaps(namespace).Update(ctx, fixed, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
