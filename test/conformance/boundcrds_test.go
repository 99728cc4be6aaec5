package conformance

// The bound-CRD harness: upstream's CRD specs create their own
// CustomResourceDefinitions, so to run them against APIs served through
// API sharing (apis.kcp.io) a proxy in front of one consumer workspace
// turns each CRD the specs write into what a provider publishes, in a
// provider workspace of its own:
//
//   - create: an APIResourceSchema of the CRD's spec, an APIExport of it
//     and, in the consumer, an APIBinding to that export; the CRD the specs
//     read back is Established once the binding is Bound, and a schema kcp
//     refuses comes back as the create's error;
//   - update and patch: a new APIResourceSchema the export switches to (a
//     provider's schema version switch);
//   - delete: the binding (which deletes the consumer's objects), then the
//     export and its schemas.
//
// Everything else, the custom resources above all, goes to the consumer
// workspace unchanged: that is what the specs check through the binding.
// The proxy only plays the provider; it adds nothing to what is served.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/test/e2e/framework"
)

const crdsPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

// boundCRDs is the proxy.
type boundCRDs struct {
	consumer, provider dynamic.Interface
	consumerPath       string
	providerPath       string
	upstream           *httputil.ReverseProxy
	rv                 atomic.Int64
	schemaSeq          atomic.Int64

	mu   sync.Mutex
	crds map[string]*boundCRD
}

// boundCRD is one CRD the specs created, as they see it.
type boundCRD struct {
	crd     *apiextensionsv1.CustomResourceDefinition
	schemas []string
}

func newBoundCRDs(t *testing.T, s *framework.Server, consumer, provider string) *boundCRDs {
	at := s.Config
	target, err := url.Parse(s.URL() + "/clusters/" + consumer)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(at(consumer))
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1 // watches stream
	return &boundCRDs{
		consumer:     dynamic.NewForConfigOrDie(at(consumer)),
		provider:     dynamic.NewForConfigOrDie(at(provider)),
		providerPath: provider,
		consumerPath: "/clusters/" + consumer,
		upstream:     rp,
		crds:         map[string]*boundCRD{},
	}
}

// kubeconfig starts the proxy and writes a kubeconfig for it.
func (b *boundCRDs) kubeconfig(t *testing.T, dir string) string {
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bound"] = &clientcmdapi.Cluster{Server: srv.URL}
	cfg.AuthInfos["bound"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["bound"] = &clientcmdapi.Context{Cluster: "bound", AuthInfo: "bound"}
	cfg.CurrentContext = "bound"
	p := filepath.Join(dir, "bound-crds.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (b *boundCRDs) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// Server-relative URLs kcp hands out (the OpenAPI v3 index) carry the
	// consumer's path already.
	if p, ok := strings.CutPrefix(req.URL.Path, b.consumerPath); ok && (p == "" || strings.HasPrefix(p, "/")) {
		req.URL.Path, req.URL.RawPath = p, ""
	}
	rest, ok := strings.CutPrefix(req.URL.Path, crdsPath)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		b.upstream.ServeHTTP(w, req)
		return
	}
	name, sub, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	ctx := req.Context()
	var out runtime.Object
	var err error
	code := http.StatusOK
	switch {
	case sub != "":
		err = apierrors.NewMethodNotSupported(apiextensionsv1.Resource("customresourcedefinitions/"+sub), req.Method)
	case name == "" && req.Method == http.MethodPost:
		out, err = b.create(ctx, req)
		code = http.StatusCreated
	case name == "" && req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true":
		out, err = b.list(req.URL.Query().Get("labelSelector"))
	case name == "" && req.Method == http.MethodDelete:
		out, err = b.deleteCollection(ctx, req.URL.Query().Get("labelSelector"))
	case name != "" && req.Method == http.MethodGet:
		out, err = b.get(ctx, name)
	case name != "" && (req.Method == http.MethodPut || req.Method == http.MethodPatch):
		out, err = b.update(ctx, name, req)
	case name != "" && req.Method == http.MethodDelete:
		out, err = b.delete(ctx, name)
	default:
		err = apierrors.NewMethodNotSupported(apiextensionsv1.Resource("customresourcedefinitions"), req.Method)
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		status := apierrors.APIStatus(nil)
		if se, ok := err.(apierrors.APIStatus); ok {
			status = se
		} else {
			status = apierrors.NewInternalError(err)
		}
		st := status.Status()
		st.Kind, st.APIVersion = "Status", "v1"
		w.WriteHeader(int(st.Code))
		json.NewEncoder(w).Encode(st)
		return
	}
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(out)
}

// crdCodecs decode CRDs in JSON, YAML or protobuf (what e2e clients send).
var crdCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	apiextensionsv1.AddToScheme(scheme)
	return serializer.NewCodecFactory(scheme)
}()

func decodeCRD(r io.Reader) (*apiextensionsv1.CustomResourceDefinition, error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if _, _, err := crdCodecs.UniversalDeserializer().Decode(body, nil, &crd); err != nil {
		return nil, apierrors.NewBadRequest("the bound-CRD harness reads CustomResourceDefinitions: " + err.Error())
	}
	return &crd, nil
}

func toUnstructured(obj interface{}) *unstructured.Unstructured {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: u}
}

// publishSchema writes the CRD's spec as a new APIResourceSchema.
func (b *boundCRDs) publishSchema(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (string, error) {
	name := fmt.Sprintf("s%d.%s", b.schemaSeq.Add(1), crd.Name)
	s := &apis.APIResourceSchema{
		TypeMeta:   metav1.TypeMeta{APIVersion: apis.Group + "/" + apis.Version, Kind: "APIResourceSchema"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       apis.APIResourceSchemaSpec{Group: crd.Spec.Group, Names: crd.Spec.Names, Scope: crd.Spec.Scope, Versions: crd.Spec.Versions},
	}
	_, err := b.provider.Resource(apis.SchemasResource).Create(ctx, toUnstructured(s), metav1.CreateOptions{})
	return name, err
}

// waitBound waits until the consumer's binding serves schema, or reports
// why it does not (the export's Ready condition says what is wrong with a
// schema, in the words CRD validation uses).
func (b *boundCRDs) waitBound(ctx context.Context, name, schema string) error {
	var why string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		u, err := b.consumer.Resource(apis.BindingsResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var binding apis.APIBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &binding); err != nil {
			return err
		}
		for _, r := range binding.Status.BoundResources {
			if r.Schema == schema && meta.IsStatusConditionTrue(binding.Status.Conditions, apis.ConditionBound) {
				return nil
			}
		}
		if c := meta.FindStatusCondition(binding.Status.Conditions, apis.ConditionBound); c != nil {
			why = c.Message
		}
		if e, err := b.provider.Resource(apis.ExportsResource).Get(ctx, name, metav1.GetOptions{}); err == nil {
			conds, _, _ := unstructured.NestedSlice(e.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]interface{})
				if m["type"] == apis.ConditionReady && m["status"] == "False" {
					return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
						Message: fmt.Sprintf("CustomResourceDefinition.apiextensions.k8s.io %q is invalid: %v", name, m["message"])}}
				}
			}
		}
	}
	return apierrors.NewTimeoutError(fmt.Sprintf("APIBinding %s not bound to schema %s: %s", name, schema, why), 1)
}

// served is the CRD as the specs read it: Established once the binding
// serves its current schema.
func (b *boundCRDs) served(ctx context.Context, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	b.mu.Lock()
	bc := b.crds[name]
	b.mu.Unlock()
	u, err := b.consumer.Resource(apis.BindingsResource).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || bc == nil {
		b.mu.Lock()
		delete(b.crds, name)
		b.mu.Unlock()
		return nil, apierrors.NewNotFound(apiextensionsv1.Resource("customresourcedefinitions"), name)
	}
	if err != nil {
		return nil, err
	}
	var binding apis.APIBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &binding); err != nil {
		return nil, err
	}
	b.mu.Lock()
	crd := bc.crd.DeepCopy()
	current := bc.schemas[len(bc.schemas)-1]
	b.mu.Unlock()
	crd.DeletionTimestamp = binding.DeletionTimestamp
	established := apiextensionsv1.ConditionFalse
	for _, r := range binding.Status.BoundResources {
		if r.Schema == current && meta.IsStatusConditionTrue(binding.Status.Conditions, apis.ConditionBound) {
			established = apiextensionsv1.ConditionTrue
		}
	}
	now := metav1.Now()
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{
		{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", LastTransitionTime: now},
		{Type: apiextensionsv1.Established, Status: established, Reason: "Bound", LastTransitionTime: now},
	}
	if crd.DeletionTimestamp != nil {
		crd.Status.Conditions = append(crd.Status.Conditions, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue, Reason: "InstanceDeletionInProgress", LastTransitionTime: now})
	}
	return crd, nil
}

// accept fills what the API server sets on a CRD it accepts.
func (b *boundCRDs) accept(crd *apiextensionsv1.CustomResourceDefinition, prev *apiextensionsv1.CustomResourceDefinition) {
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	crd.TypeMeta = metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
	crd.ResourceVersion = strconv.FormatInt(b.rv.Add(1), 10)
	names := crd.Spec.Names
	if names.Singular == "" {
		names.Singular = strings.ToLower(names.Kind)
	}
	if names.ListKind == "" {
		names.ListKind = names.Kind + "List"
	}
	crd.Status.AcceptedNames = names
	var stored []string
	if prev != nil {
		crd.UID, crd.CreationTimestamp, crd.Generation = prev.UID, prev.CreationTimestamp, prev.Generation
		if !equalJSON(prev.Spec, crd.Spec) {
			crd.Generation++
		}
		stored = prev.Status.StoredVersions
	} else {
		crd.UID, crd.CreationTimestamp, crd.Generation = types.UID(uuid.NewUUID()), metav1.Now(), 1
	}
	for _, v := range crd.Spec.Versions {
		if v.Storage && !contains(stored, v.Name) {
			stored = append(stored, v.Name)
		}
	}
	crd.Status.StoredVersions = stored
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func equalJSON(a, b interface{}) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func (b *boundCRDs) create(ctx context.Context, req *http.Request) (runtime.Object, error) {
	crd, err := decodeCRD(req.Body)
	if err != nil {
		return nil, err
	}
	if crd.Name == "" && crd.GenerateName != "" {
		crd.Name = crd.GenerateName + string(uuid.NewUUID())[:5]
	}
	if crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == apiextensionsv1.WebhookConverter {
		return nil, apierrors.NewBadRequest("an APIResourceSchema has no conversion webhook")
	}
	b.mu.Lock()
	_, exists := b.crds[crd.Name]
	b.mu.Unlock()
	if exists {
		return nil, apierrors.NewAlreadyExists(apiextensionsv1.Resource("customresourcedefinitions"), crd.Name)
	}
	if req.URL.Query().Get("dryRun") != "" {
		return nil, apierrors.NewBadRequest("the bound-CRD harness does not dry-run")
	}
	b.accept(crd, nil)
	schema, err := b.publishSchema(ctx, crd)
	if err != nil {
		return nil, err
	}
	export := &apis.APIExport{
		TypeMeta:   metav1.TypeMeta{APIVersion: apis.Group + "/" + apis.Version, Kind: "APIExport"},
		ObjectMeta: metav1.ObjectMeta{Name: crd.Name},
		Spec:       apis.APIExportSpec{LatestResourceSchemas: []string{schema}},
	}
	if _, err := b.provider.Resource(apis.ExportsResource).Create(ctx, toUnstructured(export), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	binding := &apis.APIBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: apis.Group + "/" + apis.Version, Kind: "APIBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: crd.Name},
		Spec:       apis.APIBindingSpec{Reference: apis.ExportReference{Export: apis.ExportName{Path: b.providerPath, Name: crd.Name}}},
	}
	if _, err := b.consumer.Resource(apis.BindingsResource).Create(ctx, toUnstructured(binding), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.crds[crd.Name] = &boundCRD{crd: crd, schemas: []string{schema}}
	b.mu.Unlock()
	if err := b.waitBound(ctx, crd.Name, schema); err != nil {
		// Refused: as if it had never been created.
		b.forget(context.Background(), crd.Name)
		return nil, err
	}
	return b.served(ctx, crd.Name)
}

func (b *boundCRDs) list(selector string) (runtime.Object, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	out := &apiextensionsv1.CustomResourceDefinitionList{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinitionList"}}
	b.mu.Lock()
	var names []string
	for n := range b.crds {
		names = append(names, n)
	}
	b.mu.Unlock()
	for _, n := range names {
		if crd, err := b.served(context.Background(), n); err == nil && sel.Matches(labels.Set(crd.Labels)) {
			out.Items = append(out.Items, *crd)
		}
	}
	out.ResourceVersion = strconv.FormatInt(b.rv.Load(), 10)
	return out, nil
}

func (b *boundCRDs) get(ctx context.Context, name string) (runtime.Object, error) {
	return b.served(ctx, name)
}

// update applies a PUT or a patch to the CRD, then publishes its spec as a
// new schema the export switches to.
func (b *boundCRDs) update(ctx context.Context, name string, req *http.Request) (runtime.Object, error) {
	cur, err := b.served(ctx, name)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	var next *apiextensionsv1.CustomResourceDefinition
	if req.Method == http.MethodPut {
		if next, err = decodeCRD(bytes.NewReader(body)); err != nil {
			return nil, err
		}
		if next.ResourceVersion != "" && next.ResourceVersion != cur.ResourceVersion {
			return nil, apierrors.NewConflict(apiextensionsv1.Resource("customresourcedefinitions"), name, fmt.Errorf("the object has been modified"))
		}
	} else {
		orig, _ := json.Marshal(cur)
		var patched []byte
		switch ct := strings.Split(req.Header.Get("Content-Type"), ";")[0]; ct {
		case "application/json-patch+json":
			p, perr := jsonpatch.DecodePatch(body)
			if perr != nil {
				return nil, apierrors.NewBadRequest(perr.Error())
			}
			patched, err = p.Apply(orig)
		case "application/merge-patch+json":
			patched, err = jsonpatch.MergePatch(orig, body)
		case "application/strategic-merge-patch+json":
			patched, err = strategicpatch.StrategicMergePatch(orig, body, apiextensionsv1.CustomResourceDefinition{})
		default:
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
				Reason: metav1.StatusReasonUnsupportedMediaType, Message: "the bound-CRD harness does not apply " + ct + " to CustomResourceDefinitions"}}
		}
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if next, err = decodeCRD(bytes.NewReader(patched)); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	bc := b.crds[name]
	b.mu.Unlock()
	if bc == nil {
		return nil, apierrors.NewNotFound(apiextensionsv1.Resource("customresourcedefinitions"), name)
	}
	next.Name = name
	b.accept(next, bc.crd)
	if !equalJSON(bc.crd.Spec, next.Spec) {
		schema, err := b.publishSchema(ctx, next)
		if err != nil {
			return nil, err
		}
		e, err := b.provider.Resource(apis.ExportsResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		unstructured.SetNestedStringSlice(e.Object, []string{schema}, "spec", "latestResourceSchemas")
		if _, err := b.provider.Resource(apis.ExportsResource).Update(ctx, e, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
		if err := b.waitBound(ctx, name, schema); err != nil {
			// Refused: back to the schema that was served.
			unstructured.SetNestedStringSlice(e.Object, []string{bc.schemas[len(bc.schemas)-1]}, "spec", "latestResourceSchemas")
			e.SetResourceVersion("")
			b.provider.Resource(apis.ExportsResource).Update(ctx, e, metav1.UpdateOptions{})
			return nil, err
		}
		b.mu.Lock()
		bc.schemas = append(bc.schemas, schema)
		b.mu.Unlock()
	}
	b.mu.Lock()
	bc.crd = next
	b.mu.Unlock()
	return b.served(ctx, name)
}

// delete unbinds (the binding's finalizer deletes the consumer's objects
// first); the export and its schemas go once the binding has.
func (b *boundCRDs) delete(ctx context.Context, name string) (runtime.Object, error) {
	crd, err := b.served(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := b.consumer.Resource(apis.BindingsResource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	go b.forget(context.Background(), name)
	now := metav1.Now()
	crd.DeletionTimestamp = &now
	return crd, nil
}

func (b *boundCRDs) deleteCollection(ctx context.Context, selector string) (runtime.Object, error) {
	l, err := b.list(selector)
	if err != nil {
		return nil, err
	}
	for _, crd := range l.(*apiextensionsv1.CustomResourceDefinitionList).Items {
		if _, err := b.delete(ctx, crd.Name); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusSuccess}, nil
}

// forget removes the binding, then the export and schemas of a CRD.
func (b *boundCRDs) forget(ctx context.Context, name string) {
	b.consumer.Resource(apis.BindingsResource).Delete(ctx, name, metav1.DeleteOptions{})
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := b.consumer.Resource(apis.BindingsResource).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
	}
	b.mu.Lock()
	bc := b.crds[name]
	delete(b.crds, name)
	b.mu.Unlock()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		err := b.provider.Resource(apis.ExportsResource).Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			break
		}
	}
	if bc != nil {
		for _, s := range bc.schemas {
			b.provider.Resource(apis.SchemasResource).Delete(ctx, s, metav1.DeleteOptions{})
		}
	}
}

// TestConformanceBoundAPIs runs the CRD specs that apply (specs-crd-bound.txt)
// against APIs a consumer workspace binds from a provider workspace.
func TestConformanceBoundAPIs(t *testing.T) {
	if os.Getenv("KCP_CONFORMANCE") != "1" {
		t.Skip("conformance runs with `make conformance` (KCP_CONFORMANCE=1)")
	}
	dir, bin := buildConformance(t)
	s := framework.StartServer(t, "")
	const consumer, provider = "root:bound-consumer", "root:bound-provider"
	s.CreateWorkspaces(consumer, provider)
	proxy := newBoundCRDs(t, s, consumer, provider)
	specs := filepath.Join(framework.RepoRoot(), "test", "conformance", "specs-crd-bound.txt")
	if v := os.Getenv("KCP_CONFORMANCE_BOUND_SPECS"); v != "" {
		specs = v
	}
	cmd := exec.Command(filepath.Join(dir, "run.sh"), proxy.kubeconfig(t, s.RootDir), specs)
	outdir := filepath.Join(s.RootDir, "conformance-bound")
	if v := os.Getenv("KCP_CONFORMANCE_OUTDIR"); v != "" {
		outdir = v
	}
	cmd.Env = append(os.Environ(), "BIN="+bin, "OUTDIR="+outdir)
	out, err := cmd.CombinedOutput()
	fmt.Printf("=== %s through bindings in %s\n%s\n", filepath.Base(specs), consumer, out)
	if err != nil {
		t.Errorf("%s through bindings: %v", filepath.Base(specs), err)
	}
}
