package rbacescalation

import (
	"context"
	"fmt"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// BootstrapHookName is the post-start hook (and /readyz check) that
// creates and reconciles the default roles and bindings, under upstream's
// name.
const BootstrapHookName = "rbac/bootstrap-roles"

// bootstrapWorkers bounds the reconciles in flight: on a new database
// every default role is a create.
const bootstrapWorkers = 8

// bootstrapPolicy is upstream's default policy: the roles and bindings an
// API server keeps in place (bootstrappolicy).
type bootstrapPolicy struct {
	clusterRoles        []rbacv1.ClusterRole
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	roles               map[string][]rbacv1.Role
	roleBindings        map[string][]rbacv1.RoleBinding
	// toAggregate maps a role's old name to the aggregated role that
	// replaced it; toSplit a binding's old name to the binding split from it.
	toAggregate map[string]string
	toSplit     map[string]rbacv1.ClusterRoleBinding
}

func defaultPolicy() *bootstrapPolicy {
	return &bootstrapPolicy{
		clusterRoles:        append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...),
		clusterRoleBindings: append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...),
		roles:               bootstrappolicy.NamespaceRoles(),
		roleBindings:        bootstrappolicy.NamespaceRoleBindings(),
		toAggregate:         bootstrappolicy.ClusterRolesToAggregate(),
		toSplit:             bootstrappolicy.ClusterRoleBindingsToSplit(),
	}
}

// bootstrapHook reconciles the default policy as upstream's hook does
// (same policy, same reconciliation, reconcile-protected objects left
// alone), with two differences that matter for start-up time: it reads
// what exists with four lists instead of a request per object (a restart
// finds everything in place and writes nothing), and it starts at once and
// runs the writes of a new database in parallel. Upstream's first attempt
// comes after a one-second wait, and each of its roughly 150 objects is a
// request of its own, one after another: together most of a warm start.
func bootstrapHook() genericapiserver.PostStartHookFunc {
	policy := defaultPolicy()
	return func(hc genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		var last error
		err = wait.PollUntilContextTimeout(hc.Context, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			if last = policy.ensure(ctx, client); last != nil {
				klog.InfoS("default RBAC policy not in place yet; retrying", "err", last)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			if last != nil {
				err = last
			}
			return fmt.Errorf("unable to initialize roles: %v", err)
		}
		return nil
	}
}

// listed is what one pass found: the first reconcile of an object reads
// it from here, a retry of the same object reads it again from the API.
type listed[T any] struct {
	mu    sync.Mutex
	by    map[string]*T
	asked map[string]bool
}

func newListed[T any]() *listed[T] {
	return &listed[T]{by: map[string]*T{}, asked: map[string]bool{}}
}

// get returns the listed object (ok) or that the list did not hold it
// (listedOnce) on the first ask for a key; later asks go to the API.
func (l *listed[T]) get(key string) (obj *T, listedOnce bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.asked[key] {
		return nil, false
	}
	l.asked[key] = true
	return l.by[key], true
}

func key(namespace, name string) string { return namespace + "/" + name }

func notFound(resource, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: resource}, name)
}

type clusterRoles struct {
	reconciliation.ClusterRoleModifier
	l *listed[rbacv1.ClusterRole]
}

func (c clusterRoles) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	if obj, ok := c.l.get(key("", name)); ok {
		if obj == nil {
			return nil, notFound("clusterroles", name)
		}
		return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.DeepCopy()}, nil
	}
	return c.ClusterRoleModifier.Get(namespace, name)
}

type clusterRoleBindings struct {
	reconciliation.ClusterRoleBindingClientAdapter
	l *listed[rbacv1.ClusterRoleBinding]
}

func (c clusterRoleBindings) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	if obj, ok := c.l.get(key("", name)); ok {
		if obj == nil {
			return nil, notFound("clusterrolebindings", name)
		}
		return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj.DeepCopy()}, nil
	}
	return c.ClusterRoleBindingClientAdapter.Get(namespace, name)
}

type roles struct {
	reconciliation.RoleModifier
	l *listed[rbacv1.Role]
}

func (c roles) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	if obj, ok := c.l.get(key(namespace, name)); ok {
		if obj == nil {
			return nil, notFound("roles", name)
		}
		return reconciliation.RoleRuleOwner{Role: obj.DeepCopy()}, nil
	}
	return c.RoleModifier.Get(namespace, name)
}

type roleBindings struct {
	reconciliation.RoleBindingClientAdapter
	l *listed[rbacv1.RoleBinding]
}

func (c roleBindings) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	if obj, ok := c.l.get(key(namespace, name)); ok {
		if obj == nil {
			return nil, notFound("rolebindings", name)
		}
		return reconciliation.RoleBindingAdapter{RoleBinding: obj.DeepCopy()}, nil
	}
	return c.RoleBindingClientAdapter.Get(namespace, name)
}

// ensure makes one pass: every object of the policy is reconciled (a
// failure does not stop the others); it fails if any failed.
func (p *bootstrapPolicy) ensure(ctx context.Context, client kubernetes.Interface) error {
	rbac := client.RbacV1()
	crs, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing clusterroles: %w", err)
	}
	crbs, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing clusterrolebindings: %w", err)
	}
	rs, err := rbac.Roles(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing roles: %w", err)
	}
	rbs, err := rbac.RoleBindings(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing rolebindings: %w", err)
	}
	lcr, lcrb, lr, lrb := newListed[rbacv1.ClusterRole](), newListed[rbacv1.ClusterRoleBinding](), newListed[rbacv1.Role](), newListed[rbacv1.RoleBinding]()
	for i := range crs.Items {
		lcr.by[key("", crs.Items[i].Name)] = &crs.Items[i]
	}
	for i := range crbs.Items {
		lcrb.by[key("", crbs.Items[i].Name)] = &crbs.Items[i]
	}
	for i := range rs.Items {
		lr.by[key(rs.Items[i].Namespace, rs.Items[i].Name)] = &rs.Items[i]
	}
	for i := range rbs.Items {
		lrb.by[key(rbs.Items[i].Namespace, rbs.Items[i].Name)] = &rbs.Items[i]
	}

	// Roles and bindings renamed in earlier Kubernetes releases carry an
	// operator's changes over to their new names before those are created.
	for oldName, newName := range p.toAggregate {
		old := lcr.by[key("", oldName)]
		if lcr.by[key("", newName)] != nil || old == nil || old.AggregationRule != nil {
			continue
		}
		moved := old.DeepCopy()
		moved.ObjectMeta = metav1.ObjectMeta{Name: newName, Labels: old.Labels, Annotations: old.Annotations}
		created, err := rbac.ClusterRoles().Create(ctx, moved, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("copying clusterrole %s to %s: %w", oldName, newName, err)
		}
		if err == nil {
			lcr.by[key("", newName)] = created
		} else {
			delete(lcr.by, key("", newName))
			lcr.asked[key("", newName)] = true // read it from the API
		}
	}
	for oldName, template := range p.toSplit {
		old := lcrb.by[key("", oldName)]
		if lcrb.by[key("", template.Name)] != nil || old == nil {
			continue
		}
		split := template.DeepCopy()
		split.Subjects, split.Labels, split.Annotations = old.Subjects, old.Labels, old.Annotations
		created, err := rbac.ClusterRoleBindings().Create(ctx, split, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("splitting clusterrolebinding %s into %s: %w", oldName, template.Name, err)
		}
		if err == nil {
			lcrb.by[key("", template.Name)] = created
		} else {
			lcrb.asked[key("", template.Name)] = true
		}
	}

	var tasks []func() error
	for i := range p.clusterRoles {
		o := reconciliation.ReconcileRoleOptions{
			Role:    reconciliation.ClusterRoleRuleOwner{ClusterRole: p.clusterRoles[i].DeepCopy()},
			Client:  clusterRoles{reconciliation.ClusterRoleModifier{Client: rbac.ClusterRoles()}, lcr},
			Confirm: true,
		}
		tasks = append(tasks, func() error { return reconcileRole(&o, "clusterrole", "", p.clusterRoles[i].Name) })
	}
	for i := range p.clusterRoleBindings {
		o := reconciliation.ReconcileRoleBindingOptions{
			RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: p.clusterRoleBindings[i].DeepCopy()},
			Client:      clusterRoleBindings{reconciliation.ClusterRoleBindingClientAdapter{Client: rbac.ClusterRoleBindings()}, lcrb},
			Confirm:     true,
		}
		tasks = append(tasks, func() error { return reconcileBinding(&o, "clusterrolebinding", "", p.clusterRoleBindings[i].Name) })
	}
	for ns, list := range p.roles {
		for i := range list {
			o := reconciliation.ReconcileRoleOptions{
				Role:    reconciliation.RoleRuleOwner{Role: list[i].DeepCopy()},
				Client:  roles{reconciliation.RoleModifier{Client: rbac, NamespaceClient: client.CoreV1().Namespaces()}, lr},
				Confirm: true,
			}
			tasks = append(tasks, func() error { return reconcileRole(&o, "role", ns, list[i].Name) })
		}
	}
	for ns, list := range p.roleBindings {
		for i := range list {
			o := reconciliation.ReconcileRoleBindingOptions{
				RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: list[i].DeepCopy()},
				Client:      roleBindings{reconciliation.RoleBindingClientAdapter{Client: rbac, NamespaceClient: client.CoreV1().Namespaces()}, lrb},
				Confirm:     true,
			}
			tasks = append(tasks, func() error { return reconcileBinding(&o, "rolebinding", ns, list[i].Name) })
		}
	}

	var (
		mu     sync.Mutex
		failed []error
		wg     sync.WaitGroup
		slots  = make(chan struct{}, bootstrapWorkers)
	)
	for _, task := range tasks {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := task(); err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d default roles and bindings not reconciled, first: %w", len(failed), len(tasks), failed[0])
	}
	return nil
}

// retriable are the errors upstream's hook retries an object on: a
// conflict, and the 503 of a server still warming up.
func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsServiceUnavailable(err)
}

func reconcileRole(o *reconciliation.ReconcileRoleOptions, kind, ns, name string) error {
	return retry.OnError(retry.DefaultBackoff, retriable, func() error {
		r, err := o.Run()
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, key(ns, name), err)
		}
		if r.Protected && r.Operation != reconciliation.ReconcileNone {
			klog.InfoS("left a reconcile-protected default role as it is", "kind", kind, "namespace", ns, "name", name, "missingRules", r.MissingRules)
		}
		return nil
	})
}

func reconcileBinding(o *reconciliation.ReconcileRoleBindingOptions, kind, ns, name string) error {
	return retry.OnError(retry.DefaultBackoff, retriable, func() error {
		r, err := o.Run()
		if err != nil {
			return fmt.Errorf("%s %s: %w", kind, key(ns, name), err)
		}
		if r.Protected && r.Operation != reconciliation.ReconcileNone {
			klog.InfoS("left a reconcile-protected default binding as it is", "kind", kind, "namespace", ns, "name", name, "missingSubjects", r.MissingSubjects)
		}
		return nil
	})
}
