// Package serveddefaults serves objects every namespace or workspace holds
// without storing them: a namespace's service account "default" and config
// map "kube-root-ca.crt", and a workspace's ClusterRoleBinding
// "workspace-owner". Upstream, controllers write the first two into every
// new namespace; here they are a pure function of their parent (the
// namespace's cluster, name, UID, creation revision and time, or the
// LogicalCluster with the owner kcp recorded on it) and the server's CA, so
// storing them cost seven of the fourteen writes of an empty workspace and
// as many objects in every replica's caches, for nothing a client could
// tell apart.
//
// The decorator sits on kine's backend, below the etcd API, so the API
// server, its watch cache and every client see the same objects as if they
// were stored:
//
//   - Reads (Get, List, ListStream, Count) at a revision add the default
//     of every parent that is live (a namespace: not terminating) at that revision,
//     unless its key is stored. A stored value wins: a default that was
//     changed is an ordinary row from then on.
//   - Writes: an update of a served default stores it (a create of its key,
//     checked against the served object's revision); a delete of one
//     stores a tombstone (a row whose value no client can write), so the
//     default stays deleted while the namespace lives; a create over a
//     tombstone updates that row. A create of a default whose parent is
//     gone or terminating is refused (409), so no row outlives its namespace. The namespacedefaults controller re-creates
//     a deleted default, as upstream's controllers do.
//   - Watch: a served default appears (ADDED) at the revision that created
//     its parent, and disappears (DELETED) at the revision that made a
//     namespace terminate (or deleted the parent). Its first stored write is a
//     MODIFIED of the served object, a tombstone a DELETED, a create over a
//     tombstone an ADDED. Each parent's event yields at most one event per
//     resource at its revision, so watchers resuming from any revision see
//     every change once.
//
// Served objects get their resourceVersion from the parent's creation
// revision and a UID derived from the parent's UID, so every replica
// serves the same bytes. Objects per namespace that are not rows are not
// in SQL: docs/sql-auditing.md says how they are counted.
package serveddefaults

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/google/uuid"
	kineserver "github.com/k3s-io/kine/pkg/server"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/storedjson"
)

// The names of the served defaults.
const (
	ServiceAccount  = "default"
	RootCAConfigMap = "kube-root-ca.crt"
	// OwnerBinding makes a workspace's creator cluster-admin inside it.
	OwnerBinding = "workspace-owner"
)

// tombstonePrefix starts the value of a deleted default. The API server
// stores objects as JSON that starts with {"kind": (or {"apiVersion"),
// so no client can write a value that looks like a tombstone.
var tombstonePrefix = []byte(`{"kcp.io/deleted-default":`)

type tombstone struct {
	// ParentUID is the namespace (or LogicalCluster) whose default was
	// deleted: one of the same name created later serves its default again.
	ParentUID string `json:"namespaceUID"`
}

// source is a kind of object that defaults derive from.
type source struct {
	prefix string // "/registry/<group>/<resource>/"
	end    string // end of the resource's key range
	// rest is how a parent's key continues after prefix: "<cluster>/<name>".
	parse func(rest string, value []byte) *parent
}

var (
	namespaces = &source{prefix: "/registry/core/namespaces/", parse: parseNamespace}
	// A workspace's LogicalCluster is the object "cluster" in it.
	logicalClusters = &source{prefix: "/registry/tenancy.kcp.io/logicalclusters/", parse: parseLogicalCluster}
)

// parent is what a served default depends on.
type parent struct {
	src       *source
	rest      string // "<cluster>/<name>"
	uid       string
	created   metav1.Time
	createRev int64
	active    bool   // serves its defaults: live (a namespace: not terminating)
	owner     string // a LogicalCluster's recorded owner
}

func (p *parent) cluster() string { c, _, _ := strings.Cut(p.rest, "/"); return c }
func (p *parent) name() string    { _, n, _ := strings.Cut(p.rest, "/"); return n }

func (p *parent) meta(resource, namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              name,
		Namespace:         namespace,
		UID:               types.UID(uuid.NewSHA1(uuid.NameSpaceURL, []byte("kcp:"+resource+"/"+p.rest+"/"+name+"/"+p.uid)).String()),
		CreationTimestamp: p.created,
		Annotations:       map[string]string{logicalcluster.Annotation: p.cluster()},
	}
}

// kind is one served default.
type kind struct {
	src      *source
	resource string // key segment: serviceaccounts, configmaps, ...
	name     string // object name
	prefix   string // "/registry/<group>/<resource>/"
	end      string // end of the resource's key range
	// object is the default of p; nil if p has none.
	object func(b *Backend, p *parent) runtime.Object
}

var kinds = []*kind{
	{src: namespaces, prefix: "/registry/core/serviceaccounts/", resource: "serviceaccounts", name: ServiceAccount, object: func(b *Backend, p *parent) runtime.Object {
		return &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{Kind: "ServiceAccount", APIVersion: "v1"}, ObjectMeta: p.meta("serviceaccounts", p.name(), ServiceAccount)}
	}},
	{src: namespaces, prefix: "/registry/core/configmaps/", resource: "configmaps", name: RootCAConfigMap, object: func(b *Backend, p *parent) runtime.Object {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: p.meta("configmaps", p.name(), RootCAConfigMap),
			Data: map[string]string{"ca.crt": b.caPEM}}
	}},
	{src: logicalClusters, prefix: "/registry/rbac.authorization.k8s.io/clusterrolebindings/", resource: "clusterrolebindings", name: OwnerBinding, object: func(b *Backend, p *parent) runtime.Object {
		if p.owner == "" {
			return nil
		}
		return &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{Kind: "ClusterRoleBinding", APIVersion: "rbac.authorization.k8s.io/v1"},
			ObjectMeta: p.meta("clusterrolebindings", "", OwnerBinding),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: p.owner}},
		}
	}},
}

func init() {
	for _, s := range []*source{namespaces, logicalClusters} {
		s.end = strings.TrimSuffix(s.prefix, "/") + "0"
	}
	for _, k := range kinds {
		k.end = strings.TrimSuffix(k.prefix, "/") + "0"
	}
}

// has tells whether p has a default of kind k (object is nil exactly when
// it has none): a LogicalCluster without a recorded owner has no owner
// binding.
func (k *kind) has(p *parent) bool { return k.src != logicalClusters || p.owner != "" }

// key is the default's key for a parent's key rest.
func (k *kind) key(parentRest string) string {
	if k.src == namespaces {
		return k.prefix + parentRest + "/" + k.name
	}
	c, _, _ := strings.Cut(parentRest, "/")
	return k.prefix + c + "/" + k.name
}

// parentRest is the key rest of the parent of a default's key rest; false
// if rest is not a default's.
func (k *kind) parentRest(rest string) (string, bool) {
	head, name, ok := cutLast(rest)
	if !ok || name != k.name {
		return "", false
	}
	if k.src == namespaces {
		return head, strings.Count(head, "/") == 1
	}
	return head + "/" + tenancy.LogicalClusterName, !strings.Contains(head, "/")
}

// cutAfter bounds a page built from parents up to the one at rest: every
// later parent's default sorts at or above it.
func (k *kind) cutAfter(rest string) string {
	if k.src == namespaces {
		// A later namespace may extend the name ("a" then "a-b"), and
		// '-' is the smallest character a name continues with.
		return k.prefix + rest + "-"
	}
	// Cluster names hold no '/': LogicalClusters sort as their defaults do.
	return k.key(rest) + "\x00"
}

// Backend is a kine backend that serves the defaults.
type Backend struct {
	kineserver.Backend
	caPEM string
	memo  memo
	scans scans
}

// New serves the defaults on top of b; caPEM is what kube-root-ca.crt holds
// (the CA every replica's serving certificate is issued from).
func New(b kineserver.Backend, caPEM string) *Backend {
	return &Backend{Backend: b, caPEM: caPEM}
}

func parseNamespace(rest string, value []byte) *parent {
	if strings.Count(rest, "/") != 1 {
		return nil
	}
	var phase string
	deleting := false
	uid, created, ok := parseStored(value, func(k, v []byte) error {
		if string(k) == "deletionTimestamp" {
			deleting = !storedjson.IsNull(v)
		}
		return nil
	}, func(k, v []byte) error {
		if string(k) == "phase" {
			phase, _ = storedjson.String(v)
		}
		return nil
	})
	if !ok {
		return nil
	}
	return &parent{rest: rest, uid: uid, created: created,
		active: !deleting && phase != string(corev1.NamespaceTerminating)}
}

// parseLogicalCluster reads the owner kcp recorded (a LogicalCluster's
// annotations are written only by kcp, once, at its creation).
func parseLogicalCluster(rest string, value []byte) *parent {
	if c, n, ok := strings.Cut(rest, "/"); !ok || c == "" || n != tenancy.LogicalClusterName {
		return nil
	}
	var ownerJSON string
	uid, created, ok := parseStored(value, func(k, v []byte) error {
		if string(k) != "annotations" {
			return nil
		}
		return storedjson.Object(v, func(k, v []byte) error {
			if string(k) == tenancy.OwnerAnnotation {
				ownerJSON, _ = storedjson.String(v)
			}
			return nil
		})
	}, nil)
	if !ok {
		return nil
	}
	p := &parent{rest: rest, uid: uid, created: created, active: true}
	var owner struct {
		Username string `json:"username"`
	}
	if ownerJSON != "" && json.Unmarshal([]byte(ownerJSON), &owner) == nil {
		p.owner = owner.Username
	}
	return p
}

// parseStored reads a stored parent's UID and creation time in one pass
// (storage/storedjson: managed fields are most of the bytes and are
// skipped), handing the other members of its metadata to meta and those of
// its status to status (nil: status is not read). ok is false for a value that is
// malformed or has no UID.
func parseStored(value []byte, meta, status func(k, v []byte) error) (uid string, created metav1.Time, ok bool) {
	err := storedjson.Members(value, func(k, v []byte) bool {
		var err error
		switch {
		case string(k) == "metadata":
			err = storedjson.Object(v, func(k, v []byte) error {
				switch string(k) {
				case "uid":
					uid, _ = storedjson.String(v)
				case "creationTimestamp":
					return created.UnmarshalJSON(v)
				default:
					return meta(k, v)
				}
				return nil
			})
		case string(k) == "status" && status != nil:
			err = storedjson.Object(v, status)
		}
		ok = err == nil
		return ok
	})
	return uid, created, err == nil && ok && uid != ""
}

// parentOf reads a parent's key-value; nil if kv is not one.
func parentOf(kv *kineserver.KeyValue) *parent {
	if kv == nil || len(kv.Value) == 0 {
		return nil
	}
	for _, s := range []*source{namespaces, logicalClusters} {
		if rest, ok := strings.CutPrefix(kv.Key, s.prefix); ok {
			p := s.parse(rest, kv.Value)
			if p != nil {
				p.src, p.createRev = s, kv.CreateRevision
			}
			return p
		}
	}
	return nil
}

// defaultOf says whether key is a served default's key, which, and the
// key of its parent.
func defaultOf(key string) (*kind, string, bool) {
	for _, k := range kinds {
		rest, ok := strings.CutPrefix(key, k.prefix)
		if !ok {
			continue
		}
		pr, ok := k.parentRest(rest)
		if !ok {
			return nil, "", false
		}
		return k, pr, true
	}
	return nil, "", false
}

func cutLast(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// served is the default of kind k of p as a stored key-value would be; nil
// if p has none.
func (b *Backend) served(k *kind, p *parent) *kineserver.KeyValue {
	o := k.object(b, p)
	if o == nil {
		return nil
	}
	var buf bytes.Buffer
	if err := servedCodec.Encode(o, &buf); err != nil {
		panic(err) // built-in types, registered
	}
	v := buf.Bytes()
	return &kineserver.KeyValue{Key: k.key(p.rest), Value: v, CreateRevision: p.createRev, ModRevision: p.createRev, Version: 1}
}

// servedCodec encodes served objects: Kubernetes protobuf, which the API
// server's storage decoder recognizes beside the JSON it writes. Served
// objects are never stored (a changed default is written by the API server,
// as JSON), and a watch cache's fill decodes every one of them: at 100,000
// workspaces 700,000 objects, most of them the CA's config map, whose PEM
// the JSON decoder read character by character. SQL auditing reads only
// stored rows, so nothing reads these bytes but the API server.
var servedCodec = protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)

func isTombstone(kv *kineserver.KeyValue) bool {
	return kv != nil && IsTombstone(kv.Value)
}

// IsTombstone says whether a stored value is the tombstone of a deleted
// default (a row no client reads as an object).
func IsTombstone(value []byte) bool { return bytes.HasPrefix(value, tombstonePrefix) }

func tombstoneOf(kv *kineserver.KeyValue) string {
	var t map[string]tombstone
	if json.Unmarshal(kv.Value, &t) != nil {
		return ""
	}
	return t["kcp.io/deleted-default"].ParentUID
}

func tombstoneValue(parentUID string) []byte {
	v, _ := json.Marshal(map[string]tombstone{"kcp.io/deleted-default": {ParentUID: parentUID}})
	return v
}

// hides says whether stored (the row at a default's key, possibly nil)
// keeps p's default from being served.
func hides(stored *kineserver.KeyValue, p *parent) bool {
	if stored == nil {
		return false
	}
	return !isTombstone(stored) || tombstoneOf(stored) == p.uid
}

// state is a default key as clients see it at one revision.
type state struct {
	rev     int64                // the revision read at
	stored  *kineserver.KeyValue // the row, tombstone or not; nil if none
	virtual *kineserver.KeyValue // what clients see; nil if nothing
	parent  *parent              // the parent; nil if none
}

func (b *Backend) state(ctx context.Context, k *kind, parentRest string, revision int64) (state, error) {
	key := k.key(parentRest)
	rev, stored, err := b.Backend.Get(ctx, key, revision, false)
	if err != nil {
		return state{rev: rev}, err
	}
	at := revision
	if at == 0 {
		at = rev
	}
	s := state{rev: rev, stored: stored}
	if stored != nil && !isTombstone(stored) {
		s.virtual = stored
	}
	_, pkv, err := b.Backend.Get(ctx, k.src.prefix+parentRest, at, false)
	if err != nil {
		return s, err
	}
	s.parent = parentOf(pkv)
	if s.virtual == nil && s.parent != nil && s.parent.active && !hides(stored, s.parent) {
		s.virtual = b.served(k, s.parent)
	}
	return s, nil
}

func keysOnly(kv *kineserver.KeyValue, only bool) *kineserver.KeyValue {
	if kv == nil || !only {
		return kv
	}
	c := *kv
	c.Value = nil
	return &c
}

func (b *Backend) Get(ctx context.Context, key string, revision int64, only bool) (int64, *kineserver.KeyValue, error) {
	k, pr, ok := defaultOf(key)
	if !ok {
		return b.Backend.Get(ctx, key, revision, only)
	}
	s, err := b.state(ctx, k, pr, revision)
	return s.rev, keysOnly(s.virtual, only), err
}

func (b *Backend) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	k, pr, ok := defaultOf(key)
	if !ok {
		return b.Backend.Create(ctx, key, value, lease)
	}
	s, err := b.state(ctx, k, pr, 0)
	switch {
	case err != nil:
		return s.rev, err
	case s.virtual != nil:
		return s.rev, kineserver.ErrKeyExists
	case s.parent == nil || !s.parent.active:
		// A create that admission let through on a stale view of a
		// namespace that is gone or terminating (the namespacedefaults
		// controller re-creating a deleted default as the namespace
		// deletion begins): stored now, it would outlive the namespace,
		// whose deletion may have swept its content already and clears
		// only tombstones. Upstream's lifecycle admission refuses such a
		// create; this is the same refusal where its view was late,
		// answered as the conflict the API server can express.
		return s.rev, kineserver.ErrKeyExists
	case s.stored != nil: // a tombstone
		rev, _, ok, err := b.Backend.Update(ctx, key, value, s.stored.ModRevision, lease)
		if err == nil && !ok {
			err = kineserver.ErrKeyExists
		}
		return rev, err
	}
	return b.Backend.Create(ctx, key, value, lease)
}

func (b *Backend) Update(ctx context.Context, key string, value []byte, revision, lease int64) (int64, *kineserver.KeyValue, bool, error) {
	k, pr, ok := defaultOf(key)
	if !ok {
		return b.Backend.Update(ctx, key, value, revision, lease)
	}
	s, err := b.state(ctx, k, pr, 0)
	switch {
	case err != nil:
		return s.rev, nil, false, err
	case s.virtual == nil || s.virtual.ModRevision != revision:
		return s.rev, s.virtual, false, nil
	case s.stored != nil && !isTombstone(s.stored):
		return b.Backend.Update(ctx, key, value, revision, lease)
	}
	// The served object becomes a row.
	return b.replace(ctx, k, pr, s, value, lease)
}

// replace writes value at a default's key whose served object is s.virtual,
// checked against what is stored there (nothing, or a tombstone).
func (b *Backend) replace(ctx context.Context, k *kind, parentRest string, s state, value []byte, lease int64) (int64, *kineserver.KeyValue, bool, error) {
	key := k.key(parentRest)
	var rev int64
	var err error
	if s.stored == nil {
		rev, err = b.Backend.Create(ctx, key, value, lease)
		if err == kineserver.ErrKeyExists {
			err = nil
			rev = 0
		}
	} else {
		var ok bool
		rev, _, ok, err = b.Backend.Update(ctx, key, value, s.stored.ModRevision, lease)
		if !ok {
			rev = 0
		}
	}
	if err != nil {
		return rev, nil, false, err
	}
	if rev == 0 { // lost to another write: report what is there now
		now, err := b.state(ctx, k, parentRest, 0)
		return now.rev, now.virtual, false, err
	}
	return rev, &kineserver.KeyValue{Key: key, Value: value, ModRevision: rev}, true, nil
}

func (b *Backend) Delete(ctx context.Context, key string, revision int64) (int64, *kineserver.KeyValue, bool, error) {
	k, pr, ok := defaultOf(key)
	if !ok {
		rev, kv, deleted, err := b.Backend.Delete(ctx, key, revision)
		if err == nil && deleted {
			b.dropTombstones(ctx, key)
		}
		return rev, kv, deleted, err
	}
	s, err := b.state(ctx, k, pr, 0)
	switch {
	case err != nil:
		return s.rev, nil, false, err
	case s.virtual == nil:
		// Nothing to delete for clients (the API server reads first and
		// answers 404); a tombstone is cleared, as deleting a workspace
		// clears every row of its cluster.
		return b.Backend.Delete(ctx, key, revision)
	case revision != 0 && s.virtual.ModRevision != revision:
		return s.rev, s.virtual, false, nil
	case s.parent == nil || !s.parent.active:
		// Nothing would be served in its place: delete the row.
		return b.Backend.Delete(ctx, key, revision)
	}
	rev, now, ok, err := b.replace(ctx, k, pr, s, tombstoneValue(s.parent.uid), 0)
	if err != nil || !ok {
		return rev, now, false, err
	}
	return rev, s.virtual, true, nil
}

// dropTombstones deletes the tombstones of a deleted parent's defaults
// (their delete events are not shown to anyone: the defaults were deleted
// already). Best effort: a tombstone left behind names the parent's UID,
// so it hides nothing from a parent of the same name created later.
func (b *Backend) dropTombstones(ctx context.Context, parentKey string) {
	for _, k := range kinds {
		rest, ok := strings.CutPrefix(parentKey, k.src.prefix)
		if !ok {
			continue
		}
		if _, kv, err := b.Backend.Get(ctx, k.key(rest), 0, false); err == nil && isTombstone(kv) {
			_, _, _, _ = b.Backend.Delete(ctx, kv.Key, kv.ModRevision)
		}
	}
}
