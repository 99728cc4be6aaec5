package namespacedefaults

import (
	"context"
	"errors"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/storage/serveddefaults"
)

const tombstone = `{"kcp.io/deleted-default":{"parentUID":"u1"}}`

func TestListingChangedReadsOnlyStoredDefaultsAndResumesFromTheirRevision(t *testing.T) {
	rows := map[string]string{
		"/registry/core/serviceaccounts/root:a/ns1/default": tombstone,
		"/registry/core/serviceaccounts/root:a/ns2/default": `{"metadata":{"name":"default"}}`,
		"/registry/core/serviceaccounts/root:b/ns1/builder": tombstone, // not a default
		"/registry/core/serviceaccounts/root:b/default":     tombstone, // not a namespaced key
	}
	var asked string
	changed := func(_ context.Context, prefix string, fn func(key string, value []byte, revision int64) error) (int64, error) {
		asked = prefix
		for k, v := range rows {
			if err := fn(k, []byte(v), 3); err != nil {
				return 0, err
			}
		}
		return 42, nil
	}
	fake := watch.NewFake()
	var watchedFrom string
	inner := &cache.ListWatch{WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
		watchedFrom = o.ResourceVersion
		return fake, nil
	}}
	found := map[string]string{}
	lw := cache.ToListerWatcherWithContext(listingChanged(changed, inner, "serviceaccounts", DefaultServiceAccount, func(ns string, value []byte) {
		found[ns] = string(value)
	}))
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if asked != "/registry/core/serviceaccounts/" {
		t.Fatalf("read the rows below %q", asked)
	}
	list, ok := obj.(*metav1.List)
	if !ok || list.ResourceVersion != "42" || len(list.Items) != 0 {
		t.Fatalf("list %#v: want an empty list at the revision the rows were read at (42)", obj)
	}
	want := map[string]string{
		clusterinformer.Key("root:a", "", "ns1"): tombstone,
		clusterinformer.Key("root:a", "", "ns2"): `{"metadata":{"name":"default"}}`,
	}
	if !reflect.DeepEqual(found, want) {
		t.Fatalf("found %v, want the two rows of defaults %v", found, want)
	}
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "42"})
	if err != nil || w != fake || watchedFrom != "42" {
		t.Fatalf("the watch must be the inner one from the list's revision: %v, from %q", err, watchedFrom)
	}

	// A failed read fails the list (the reflector retries); nothing found.
	failing := func(context.Context, string, func(string, []byte, int64) error) (int64, error) {
		return 0, errors.New("database is gone")
	}
	found = map[string]string{}
	lw = cache.ToListerWatcherWithContext(listingChanged(failing, inner, "serviceaccounts", DefaultServiceAccount, func(ns string, value []byte) { found[ns] = "" }))
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err == nil || len(found) != 0 {
		t.Fatalf("a failed read: err %v, found %v", err, found)
	}
}

func TestStoredWrongCA(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n"
	for _, c := range []struct {
		name, value string
		wrong       bool
	}{
		{"the published CA", `{"data":{"ca.crt":"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n"}}`, false},
		{"another CA", `{"data":{"ca.crt":"other"}}`, true},
		{"an extra key", `{"data":{"ca.crt":"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n","x":"y"}}`, true},
		{"binary data too", `{"data":{"ca.crt":"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n"},"binaryData":{"b":"AAE="}}`, true},
		{"no data", `{"metadata":{"name":"kube-root-ca.crt"}}`, true},
		{"unreadable", `{"data":`, true},
	} {
		if got := storedWrongCA([]byte(c.value), ca); got != c.wrong {
			t.Errorf("%s: wrong = %v, want %v", c.name, got, c.wrong)
		}
	}
	if !serveddefaults.IsTombstone([]byte(tombstone)) || serveddefaults.IsTombstone([]byte(`{"data":{}}`)) {
		t.Fatal("tombstones are not told from config maps")
	}
}
