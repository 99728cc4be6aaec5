package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

var (
	quotasOnly         = flag.Bool("quotas", false, "only measure what ResourceQuotas and admission policies cost the server: live heap and goroutines per 1,000 quotas and per workspace with a ValidatingAdmissionPolicy")
	quotaWorkspaces    = flag.Int("quota-workspaces", 100, "workspaces for -quotas")
	quotasPerWorkspace = flag.Int("quotas-per-workspace", 10, "ResourceQuotas in each workspace's default namespace for -quotas")
)

// quotaStep is the server's state after one step of benchQuotas.
type quotaStep struct {
	name       string
	heapMiB    float64
	goroutines int
	took       time.Duration // until the step's objects were in effect
}

type quotaResult struct {
	workspaces, quotas int
	steps              []quotaStep
}

// benchQuotas creates workspaces, then ResourceQuotas in them (and charges
// each with a create), then a ValidatingAdmissionPolicy and binding in
// each, and notes the server's live heap and goroutines after each step,
// once what it created is in effect: every quota has its status and every
// policy denies.
func benchQuotas(log func(string, ...any)) (quotaResult, error) {
	r := quotaResult{workspaces: *quotaWorkspaces, quotas: *quotaWorkspaces * *quotasPerWorkspace}
	s, stop, err := startInTemp("quotas", "")
	if err != nil {
		return r, err
	}
	defer stop()
	var pairs [][2]string
	for i := range *quotaWorkspaces {
		pairs = append(pairs, [2]string{"root", fmt.Sprintf("q-%d", i)})
	}
	log("creating %d workspaces", len(pairs))
	if err := s.createWorkspaces(pairs); err != nil {
		return r, err
	}
	cs := make([]*kubernetes.Clientset, len(pairs))
	for i, p := range pairs {
		if cs[i], err = s.client(p[0] + ":" + p[1]); err != nil {
			return r, err
		}
	}
	ctx := context.Background()
	note := func(name string, took time.Duration) {
		st := quotaStep{name: name, heapMiB: s.liveHeapMiB(), goroutines: s.goroutines(), took: took}
		s.writeProfile(fmt.Sprintf("quotas-%d-goroutines.txt", len(r.steps)), log, "goroutine", "debug", "1")
		s.writeProfile(fmt.Sprintf("quotas-%d-heap.pb.gz", len(r.steps)), log, "heap", "gc", "1")
		log("%s: live heap %.1f MiB, %d goroutines (in effect after %s)", name, st.heapMiB, st.goroutines, took.Round(time.Millisecond))
		r.steps = append(r.steps, st)
	}
	time.Sleep(5 * time.Second) // let start-up work and workspace reconciles settle
	note(fmt.Sprintf("%d empty workspaces", len(pairs)), 0)

	log("creating %d ResourceQuotas and charging each", r.quotas)
	start := time.Now()
	hard := corev1.ResourceList{"count/configmaps": resource.MustParse("1000"), "count/secrets": resource.MustParse("1000")}
	if err := parallel(r.quotas, func(i int) error {
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("quota-%d", i%*quotasPerWorkspace)}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
		_, err := cs[i / *quotasPerWorkspace].CoreV1().ResourceQuotas("default").Create(ctx, q, metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, err
	}
	log("created in %s", time.Since(start).Round(time.Millisecond))
	// One create per workspace, charged to all its quotas; then every quota
	// must show it in its status.
	if err := parallel(len(cs), func(i int) error {
		_, err := cs[i].CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "charged"}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, err
	}
	if err := parallel(len(cs), func(i int) error {
		return pollFor(2*time.Minute, func() (bool, error) {
			l, err := cs[i].CoreV1().ResourceQuotas("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, q := range l.Items {
				used, ok := q.Status.Used["count/configmaps"]
				if !ok || used.Value() < 1 {
					return false, nil
				}
			}
			return len(l.Items) == *quotasPerWorkspace, nil
		})
	}); err != nil {
		return r, fmt.Errorf("quota status: %w", err)
	}
	note(fmt.Sprintf("+ %d ResourceQuotas (%d per workspace), charged", r.quotas, *quotasPerWorkspace), time.Since(start))

	log("creating a ValidatingAdmissionPolicy and binding in each workspace")
	start = time.Now()
	deny := admissionregistrationv1.Deny
	if err := parallel(len(cs), func(i int) error {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "no-forbidden"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
				Validations: []admissionregistrationv1.Validation{{Expression: "object.metadata.name != 'forbidden'"}},
			}}
		if _, err := cs[i].AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "no-forbidden"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "no-forbidden", ValidationActions: []admissionregistrationv1.ValidationAction{deny}}}
		_, err := cs[i].AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, err
	}
	if err := parallel(len(cs), func(i int) error {
		return pollFor(2*time.Minute, func() (bool, error) {
			_, err := cs[i].CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forbidden"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
				return true, nil
			}
			return false, err
		})
	}); err != nil {
		return r, fmt.Errorf("policies: %w", err)
	}
	note(fmt.Sprintf("+ a ValidatingAdmissionPolicy and binding in each of the %d workspaces", len(cs)), time.Since(start))
	return r, nil
}

// pollFor polls f every 200 ms until it is true or fails, or d passes.
func pollFor(d time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := f()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func renderQuotas(r quotaResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "What quotas and admission policies cost the server (`go run ./test/bench -quotas`; %d workspaces, SQLite; live heap after a forced collection).\n\n", r.workspaces)
	b.WriteString("| state | live heap | goroutines | change | in effect after |\n|---|---|---|---|---|\n")
	for i, st := range r.steps {
		change := ""
		if i > 0 {
			prev := r.steps[i-1]
			change = fmt.Sprintf("%+.1f MiB, %+d goroutines", st.heapMiB-prev.heapMiB, st.goroutines-prev.goroutines)
		}
		took := ""
		if st.took > 0 {
			took = st.took.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %.1f MiB | %d | %s | %s |\n", st.name, st.heapMiB, st.goroutines, change, took)
	}
	return b.String()
}
