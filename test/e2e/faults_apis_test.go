package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestFaultAPIBindingsSessionsKilled: the write paths of API sharing
// (binding admission with its finalizer, the status controller, bound
// objects stored under the export's identity, unbinding that deletes them)
// under PostgreSQL sessions killed while consumers bind, write and unbind.
// Nothing answers 500; every acknowledged binding becomes Bound; every
// acknowledged object is in its workspace and in the provider's view; every
// acknowledged unbinding ends with its objects gone from both. Workspaces
// of a type that binds the export by default are created meanwhile: every
// acknowledged one becomes Ready with its binding Bound.
func TestFaultAPIBindingsSessionsKilled(t *testing.T) {
	ds := framework.FreshPostgres(t)
	s := framework.StartServer(t, ds)
	const consumers = 6
	var names []string
	for i := range consumers {
		names = append(names, fmt.Sprintf("root:consumer-%d", i))
	}
	s.CreateWorkspaces(append([]string{"root:platform"}, names...)...)
	publishDatabases(t, s, "root:platform", "", "")
	applyYAML(t, s, "root", "apiVersion: tenancy.kcp.io/v1alpha1\nkind: WorkspaceType\nmetadata: {name: db-team}\nspec:\n  defaultAPIBindings: [{path: root:platform, export: databases}]\n")
	ctx := context.Background()
	client := func(cluster string) dynamic.Interface {
		cfg := s.Config(cluster)
		cfg.QPS, cfg.Burst, cfg.Timeout = -1, 0, 30*time.Second
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var mu sync.Mutex
	codes := map[int]int{}
	record := func(err error) bool {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			return true
		}
		if st, ok := err.(apierrors.APIStatus); ok {
			codes[int(st.Status().Code)]++
		} else {
			codes[0]++
		}
		return false
	}
	binding := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": apis.Group + "/" + apis.Version, "kind": "APIBinding", "metadata": map[string]interface{}{"name": "databases"},
		"spec": map[string]interface{}{"reference": map[string]interface{}{"export": map[string]interface{}{"path": "root:platform", "name": "databases"}}}}}
	db := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "platform.example.com/v1", "kind": "Database",
			"metadata": map[string]interface{}{"name": name, "namespace": "default"}, "spec": map[string]interface{}{"size": int64(1)}}}
	}
	// Each consumer binds (retrying what failed), then writes databases
	// for as long as the faults last; the sessions die meanwhile.
	bound := make([]bool, consumers)
	acked := make([][]string, consumers)
	var wg sync.WaitGroup
	for i, c := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := client(c)
			for try := 0; try < 20 && !bound[i]; try++ {
				_, err := d.Resource(apis.BindingsResource).Create(ctx, binding.DeepCopy(), metav1.CreateOptions{})
				bound[i] = record(err) || apierrors.IsAlreadyExists(err)
				time.Sleep(100 * time.Millisecond)
			}
			for j := 0; j < 40; j++ {
				name := fmt.Sprintf("db-%d", j)
				if _, err := d.Resource(databasesGVR).Namespace("default").Create(ctx, db(name), metav1.CreateOptions{}); err == nil {
					acked[i] = append(acked[i], name)
				} else if !apierrors.IsNotFound(err) { // not served yet: the binding is being resolved
					record(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	// Typed workspaces, created while the sessions die.
	var typed []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		d := client("root")
		for i := range 12 {
			ws := &unstructured.Unstructured{Object: map[string]interface{}{
				"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace",
				"metadata": map[string]interface{}{"name": fmt.Sprintf("typed-%d", i)}, "spec": map[string]interface{}{"type": "db-team"}}}
			if _, err := d.Resource(tenancy.WorkspacesResource).Create(ctx, ws, metav1.CreateOptions{}); record(err) {
				mu.Lock()
				typed = append(typed, "root:"+ws.GetName())
				mu.Unlock()
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	time.Sleep(700 * time.Millisecond)
	killSessions(t, ds)
	time.Sleep(700 * time.Millisecond)
	killSessions(t, ds)
	wg.Wait()
	view := viewConfig(t, s, "root:platform", "databases", "admin", "system:masters")
	// An unacknowledged create may or may not have been stored (the
	// request can fail after the commit). So the view must hold every
	// acknowledged object of the consumers still bound, and nothing else
	// than what was attempted there.
	check := func(skip map[int]bool) (bool, string) {
		got := listView(t, view)
		in := map[string]bool{}
		for _, k := range strings.Fields(got) {
			in[k] = true
		}
		for i, c := range names {
			if skip[i] && strings.Contains(got, c+"/") {
				return false, c + " is still in the view: " + got
			}
			for _, n := range acked[i] {
				if !skip[i] && !in[c+"/"+n] {
					return false, "missing " + c + "/" + n + " in: " + got
				}
			}
			for j := range 40 {
				delete(in, fmt.Sprintf("%s/db-%d", c, j))
			}
		}
		for k := range in {
			return false, "never attempted: " + k
		}
		return true, ""
	}
	total := 0
	for i := range names {
		if !bound[i] {
			t.Fatalf("%s could not create its binding in 20 tries; failures by code: %v", names[i], codes)
		}
		total += len(acked[i])
	}
	t.Logf("acknowledged: %d databases in %d consumers; failures by code: %v", total, consumers, codes)
	if codes[500] > 0 {
		t.Errorf("%d requests answered 500", codes[500])
	}
	if total == 0 {
		t.Fatal("no database was acknowledged: the test measured nothing")
	}
	for _, c := range names {
		framework.Eventually(t, 60*time.Second, "the binding of "+c+" Bound", func() (bool, string) {
			out, _ := s.KubectlErr(c, "", "get", "apibinding", "databases", "-o", "jsonpath={.status.phase}")
			return out == apis.PhaseBound, out
		})
	}
	framework.Eventually(t, 30*time.Second, "every acknowledged database in the view", func() (bool, string) { return check(nil) })
	if len(typed) == 0 {
		t.Fatal("no typed workspace was acknowledged: the test measured nothing")
	}
	for _, c := range typed {
		framework.Eventually(t, 60*time.Second, c+" Ready with its default binding Bound", func() (bool, string) {
			ws, _ := s.KubectlErr("root", "", "get", "workspace", strings.TrimPrefix(c, "root:"), "-o", "jsonpath={.status.phase}")
			if ws != "Ready" {
				return false, "workspace " + ws
			}
			out, _ := s.KubectlErr(c, "", "get", "apibinding", "databases", "-o", "jsonpath={.status.phase}")
			return out == apis.PhaseBound, "binding " + out
		})
	}

	// Half the consumers unbind while sessions die again.
	unbound := map[int]bool{}
	for i := 0; i < consumers; i += 2 {
		unbound[i] = true
		for try := 0; try < 20; try++ {
			err := client(names[i]).Resource(apis.BindingsResource).Delete(ctx, "databases", metav1.DeleteOptions{})
			if record(err) || apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if i == 2 {
			killSessions(t, ds)
		}
	}
	framework.Eventually(t, 90*time.Second, "the unbound consumers' databases gone from the view", func() (bool, string) { return check(unbound) })
	for i := range unbound {
		framework.Eventually(t, 30*time.Second, "the binding of "+names[i]+" gone", func() (bool, string) {
			_, err := client(names[i]).Resource(apis.BindingsResource).Get(ctx, "databases", metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	if codes[500] > 0 {
		t.Errorf("%d requests answered 500", codes[500])
	}
}
