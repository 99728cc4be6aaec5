package syncer

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestForeign(t *testing.T) {
	s := &Syncer{key: "mine"}
	obj := func(labels map[string]string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]interface{}{}}
		o.SetLabels(labels)
		return o
	}
	for _, tc := range []struct {
		labels map[string]string
		adopt  bool
		want   string
	}{
		{map[string]string{TargetLabel: "mine"}, false, ""},
		{nil, false, "was not created by kcp: not overwritten"},
		{nil, true, ""},
		{map[string]string{"app": "web"}, true, ""},
		{map[string]string{TargetLabel: "other"}, false, "belongs to another SyncTarget's syncer"},
		{map[string]string{TargetLabel: "other"}, true, "belongs to another SyncTarget's syncer"},
		{map[string]string{TargetLabel: ""}, true, "belongs to another SyncTarget's syncer"},
	} {
		got := s.foreign(obj(tc.labels), "deployments.apps ns/web", tc.adopt)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("labels %v adopt %v: %q, want %q", tc.labels, tc.adopt, got, tc.want)
		}
	}
}
