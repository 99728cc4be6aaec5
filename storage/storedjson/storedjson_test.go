package storedjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// storedNamespace is a namespace as the API server stores it: JSON with
// managed fields.
func storedNamespace(t *testing.T) []byte {
	t.Helper()
	ns := &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: "3f1c0c8e-1d2b-4c53-9a53-7c8f3b0f2a11",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC)),
			Labels:            map[string]string{"kubernetes.io/metadata.name": "team-a", "quote\"d": "tab\there"},
			Annotations:       map[string]string{"kcp.io/cluster": "root:org:team", "unicode": "é\u2028😀"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:kubernetes.io/metadata.name":{}}}}`)}}},
		},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
	var buf bytes.Buffer
	if err := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, clientgoscheme.Scheme, clientgoscheme.Scheme, kjson.SerializerOptions{}).Encode(ns, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// randomValue builds a JSON value of depth at most d from r: what the
// walk must step over exactly as encoding/json reads it.
func randomValue(r *rand.Rand, d int) any {
	switch n := r.Intn(8); {
	case n == 0:
		return nil
	case n == 1:
		return r.Intn(2) == 0
	case n == 2:
		return r.NormFloat64() * 1e6
	case n == 3 || d == 0:
		runes := []rune{'a', 'Z', '"', '\\', '/', '\n', '\t', 'é', '\u2028', '😀', '{', '}', '[', ']', ',', ':', ' '}
		s := make([]rune, r.Intn(12))
		for i := range s {
			s[i] = runes[r.Intn(len(runes))]
		}
		return string(s)
	case n < 6:
		l := make([]any, r.Intn(4))
		for i := range l {
			l[i] = randomValue(r, d-1)
		}
		return l
	default:
		m := map[string]any{}
		for range r.Intn(4) {
			m[fmt.Sprint(randomValue(r, 0))] = randomValue(r, d-1)
		}
		return m
	}
}

// indent adds whitespace where JSON allows it, so the walk sees both forms.
func indent(t *testing.T, data []byte) []byte {
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, " ", "\t "); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestMembersAsEncodingJSON: for stored objects and random objects, compact
// and indented, the members and raw values are what encoding/json reads.
func TestMembersAsEncodingJSON(t *testing.T) {
	docs := [][]byte{storedNamespace(t), []byte(`{}`), []byte(` { "a" : [ ] , "b\u0041\n" : { } } `), []byte(`{"a":1,"a":2}`)}
	r := rand.New(rand.NewSource(1))
	for range 300 {
		m := map[string]any{}
		for range r.Intn(6) {
			m[fmt.Sprint(randomValue(r, 0))] = randomValue(r, 4)
		}
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, raw)
	}
	for _, doc := range docs {
		for _, d := range [][]byte{doc, indent(t, doc)} {
			var want map[string]json.RawMessage
			if err := json.Unmarshal(d, &want); err != nil {
				t.Fatal(err)
			}
			got := map[string]json.RawMessage{}
			if err := Members(d, func(k []byte, v []byte) bool { got[string(k)] = v; return true }); err != nil {
				t.Fatalf("Members(%s): %v", d, err)
			}
			if len(got) != len(want) {
				t.Fatalf("Members(%s): %d members, encoding/json reads %d", d, len(got), len(want))
			}
			for k, w := range want {
				if !bytes.Equal(got[k], w) {
					t.Fatalf("Members(%s): member %q = %s, encoding/json reads %s", d, k, got[k], w)
				}
				var ws string
				wantOK := json.Unmarshal(w, &ws) == nil && !IsNull(w)
				if gs, ok := String(got[k]); ok != wantOK || gs != ws {
					t.Fatalf("String(%s) = %q, %v; encoding/json reads %q, %v", got[k], gs, ok, ws, wantOK)
				}
			}
		}
	}
}

// TestMembersMalformed: every cut of a stored object, and values that are
// not objects or not JSON, are errors, never a partial read that looks
// whole.
func TestMembersMalformed(t *testing.T) {
	doc := storedNamespace(t)
	for n := range len(doc) - 1 {
		if err := Members(doc[:n], func([]byte, []byte) bool { return true }); err == nil {
			t.Fatalf("Members of the first %d of %d bytes: no error", n, len(doc))
		}
	}
	for _, bad := range []string{``, `[]`, `"s"`, `null`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{a:1}`, `{"a":[1}`, `{"a":{]}`,
		`{"a":1}x`, `{"a":1}{}`, `{"a":tru"e"}`} {
		if err := Members([]byte(bad), func([]byte, []byte) bool { return true }); err == nil {
			t.Errorf("Members(%s): no error", bad)
		}
	}
	if err := Members(doc, func(k []byte, _ []byte) bool { return string(k) != "metadata" }); err != nil {
		t.Errorf("stopping early: %v", err)
	}
}

func BenchmarkNamespaceUID(b *testing.B) {
	doc := storedNamespace(&testing.T{})
	b.Run("storedjson", func(b *testing.B) {
		for b.Loop() {
			Members(doc, func(k []byte, v []byte) bool {
				if string(k) == "metadata" {
					Members(v, func(k []byte, v []byte) bool {
						if string(k) == "uid" {
							String(v)
						}
						return true
					})
				}
				return true
			})
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var o struct {
				Metadata struct {
					UID string `json:"uid"`
				} `json:"metadata"`
			}
			json.Unmarshal(doc, &o)
		}
	})
}

// TestObject: a nested value that is null has no members; the callback's
// first error ends the walk and is what Object returns; malformed input
// is still an error.
func TestObject(t *testing.T) {
	called := false
	if err := Object([]byte(`null`), func([]byte, []byte) error { called = true; return nil }); err != nil || called {
		t.Errorf("Object(null): %v, callback called %v", err, called)
	}
	stop := fmt.Errorf("stop")
	var seen []string
	err := Object([]byte(`{"a":1,"b":2,"c":3}`), func(k, _ []byte) error {
		seen = append(seen, string(k))
		if string(k) == "b" {
			return stop
		}
		return nil
	})
	if err != stop || len(seen) != 2 {
		t.Errorf("Object stopping at b: %v after %v", err, seen)
	}
	if err := Object([]byte(`{"a":`), func([]byte, []byte) error { return nil }); err == nil {
		t.Errorf("Object of a cut value: no error")
	}
}
