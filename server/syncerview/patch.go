package syncerview

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	kjson "sigs.k8s.io/json"

	"github.com/kcpsql/kcp/schema/workload"
)

// The view never forwards a syncer's patch as it came: it parses it
// strictly (keys in their exact letter case, no key twice, no key it does
// not expect), checks the parsed values, and forwards a patch it marshals
// itself from them. So what the API server applies is exactly what was
// checked, whatever its decoder makes of odd JSON (keys repeated in
// another letter case, duplicate keys).

// strict decodes data into v: keys match exactly (case-sensitive), and a
// duplicate or unknown key is an error.
func strict(data []byte, v any) error {
	strictErrs, err := kjson.UnmarshalStrict(data, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return strictErrs[0]
	}
	return nil
}

// finalizerOp is one operation of the finalizer-removal JSON patch.
type finalizerOp struct {
	Op    string           `json:"op"`
	Path  string           `json:"path"`
	Value *json.RawMessage `json:"value,omitempty"`
}

// finalizerRemoval checks that body is a JSON patch that tests that
// /metadata/finalizers/<i> is finalizer and removes it, and nothing else,
// and returns the patch to forward, built from the checked values.
func finalizerRemoval(body []byte, finalizer string) ([]byte, error) {
	var ops []finalizerOp
	if err := strict(body, &ops); err != nil {
		return nil, fmt.Errorf("not a plain JSON patch (keys op, path, value, in this letter case, each once): %v", err)
	}
	if len(ops) != 2 || ops[0].Op != "test" || ops[1].Op != "remove" || ops[0].Path != ops[1].Path || ops[1].Value != nil || ops[0].Value == nil {
		return nil, fmt.Errorf("want exactly [{op: test, path: /metadata/finalizers/<i>, value: %s}, {op: remove, path: the same}]", finalizer)
	}
	var value string
	if err := strict(*ops[0].Value, &value); err != nil || value != finalizer {
		return nil, fmt.Errorf("the tested value must be the finalizer %s", finalizer)
	}
	i, ok := strings.CutPrefix(ops[0].Path, "/metadata/finalizers/")
	if n, err := strconv.ParseUint(i, 10, 31); !ok || err != nil || strconv.FormatUint(n, 10) != i {
		return nil, fmt.Errorf("the path must be /metadata/finalizers/<index>, not %q", ops[0].Path)
	}
	return json.Marshal([]map[string]string{
		{"op": "test", "path": ops[0].Path, "value": finalizer},
		{"op": "remove", "path": ops[0].Path},
	})
}

// statusPatch checks that body is a merge patch {"status": ...}, or one
// that sets exactly the target's own status annotation
// {"metadata":{"annotations":{"<status prefix><key>":"..."}}}, and returns
// the patch to forward, built from the checked values.
func statusPatch(body []byte, key string) ([]byte, error) {
	var patch map[string]json.RawMessage
	if err := strict(body, &patch); err != nil || len(patch) != 1 {
		return nil, fmt.Errorf("not a merge patch with one key (status or metadata), each key once")
	}
	if status, ok := patch["status"]; ok {
		return json.Marshal(map[string]json.RawMessage{"status": status})
	}
	own := workload.StatusAnnotationPrefix + key
	value, ok := ownAnnotation(patch["metadata"], key)
	if !ok {
		return nil, fmt.Errorf("metadata may hold only the annotation %s (a string)", own)
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{own: value}}})
}

// ownAnnotation: metadata is {"annotations":{"<status prefix><key>":"..."}}
// and nothing else; it returns the annotation's value.
func ownAnnotation(metadata json.RawMessage, key string) (string, bool) {
	var meta map[string]json.RawMessage
	var annotations map[string]*string
	if metadata == nil || strict(metadata, &meta) != nil || len(meta) != 1 || meta["annotations"] == nil || strict(meta["annotations"], &annotations) != nil {
		return "", false
	}
	v := annotations[workload.StatusAnnotationPrefix+key]
	if len(annotations) != 1 || v == nil {
		return "", false
	}
	return *v, true
}
