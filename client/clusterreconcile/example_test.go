package clusterreconcile_test

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kcpsql/kcp/client/clusterinformer"
	"github.com/kcpsql/kcp/client/clusterreconcile"
)

// A controller that stamps every ConfigMap labelled stamp=yes, in every
// workspace, with the workspace it lives in.
func Example() {
	cfg := ctrl.GetConfigOrDie() // e.g. a kubeconfig aimed at https://kcp:6443/clusters/root
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		LeaderElection:          true,
		LeaderElectionID:        "configmap-stamper",
		LeaderElectionNamespace: "default", // a Lease in the cluster cfg points at
	})
	if err != nil {
		panic(err)
	}

	// One list/watch of ConfigMaps across all workspaces.
	wildcard, err := kubernetes.NewForConfig(clusterinformer.WildcardConfig(cfg))
	if err != nil {
		panic(err)
	}
	configMaps := clusterinformer.Typed[*corev1.ConfigMap](wildcard.CoreV1().ConfigMaps(""))

	// Clients of one workspace each, for writes.
	clients, err := clusterreconcile.NewClients(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		panic(err)
	}

	stamp := reconcile.TypedFunc[clusterreconcile.Request](func(ctx context.Context, req clusterreconcile.Request) (reconcile.Result, error) {
		cached, err := configMaps.Lister().Cluster(req.Cluster).Namespace(req.Namespace).Get(req.Name)
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil // deleted
		}
		if err != nil || cached.Annotations["example.com/workspace"] == req.Cluster.String() {
			return reconcile.Result{}, err
		}
		c, err := clients.Cluster(req.Cluster)
		if err != nil {
			return reconcile.Result{}, err
		}
		cm := cached.DeepCopy() // the cache's objects are shared: copy before changing
		cm.Annotations["example.com/workspace"] = req.Cluster.String()
		return reconcile.Result{}, c.Patch(ctx, cm, client.MergeFrom(cached))
	})

	err = builder.TypedControllerManagedBy[clusterreconcile.Request](mgr).
		Named("configmap-stamper").
		WatchesRawSource(clusterreconcile.NewSource(configMaps).
			WithFilter(func(cm *corev1.ConfigMap) bool { return cm.Labels["stamp"] == "yes" })).
		Complete(stamp)
	if err != nil {
		panic(err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		panic(err) // e.g. the credential may not read /clusters/*
	}
}
