// Command workspaceoperator is a small controller-runtime operator shaped
// like the ones real applications ship, for tests: it runs as a pod does,
// with client-go's in-cluster configuration (rest.InClusterConfig: the
// KUBERNETES_SERVICE_HOST/PORT environment and the files under
// /var/run/secrets/kubernetes.io/serviceaccount), watches the ConfigMaps
// labelled app=demo in its own namespace and writes, for each, a ConfigMap
// <name>-reconciled with the same data. Each reconcile also tries to list
// the namespace's Secrets and logs whether it may, so a test can see the
// RBAC the operator runs under.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const nsFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func main() {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fail("in-cluster configuration: %v", err)
	}
	b, err := os.ReadFile(nsFile)
	if err != nil {
		fail("own namespace: %v", err)
	}
	ns := strings.TrimSpace(string(b))
	fmt.Printf("workspaceoperator: talking to %s in namespace %s\n", cfg.Host, ns)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
		},
	})
	if err != nil {
		fail("manager: %v", err)
	}
	c := mgr.GetClient()
	api := mgr.GetAPIReader()
	err = ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var in corev1.ConfigMap
		if err := c.Get(ctx, req.NamespacedName, &in); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if in.Labels["app"] != "demo" {
			return reconcile.Result{}, nil
		}
		var secrets corev1.SecretList
		if err := api.List(ctx, &secrets, client.InNamespace(ns)); apierrors.IsForbidden(err) {
			fmt.Printf("workspaceoperator: listing secrets is forbidden: %v\n", err)
		} else if err == nil {
			fmt.Printf("workspaceoperator: listing secrets is allowed (%d)\n", len(secrets.Items))
		}
		out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: in.Name + "-reconciled", Namespace: in.Namespace}}
		_, err := controllerutil.CreateOrUpdate(ctx, c, out, func() error {
			out.Data = map[string]string{}
			for k, v := range in.Data {
				out.Data[k] = v
			}
			out.Data["reconciledBy"] = "workspaceoperator"
			return nil
		})
		if err == nil {
			fmt.Printf("workspaceoperator: reconciled %s\n", req.NamespacedName)
		}
		return reconcile.Result{}, err
	}))
	if err != nil {
		fail("controller: %v", err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fail("%v", err)
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "workspaceoperator: "+format+"\n", a...)
	os.Exit(1)
}
