// Package serveddefaults serves the objects every namespace holds on a
// Kubernetes cluster, the service account "default" and the config map
// "kube-root-ca.crt", without storing them. Upstream, controllers write
// both into every new namespace; here they are a pure function of the
// namespace (its cluster, name, UID, creation revision and time) and the
// server's CA, so storing them cost two writes per namespace (six per empty
// workspace) and two more objects per namespace in every replica's watch
// cache, for nothing a client could tell apart.
//
// The decorator sits on kine's backend, below the etcd API, so the API
// server, its watch cache and every client see the same objects as if they
// were stored:
//
//   - Reads (Get, List, ListStream, Count) at a revision add the default
//     of every namespace that is live and not terminating at that revision,
//     unless its key is stored. A stored value wins: a default that was
//     changed is an ordinary row from then on.
//   - Writes: an update of a served default stores it (a create of its key,
//     checked against the served object's revision); a delete of one
//     stores a tombstone (a row whose value no client can write), so the
//     default stays deleted while the namespace lives; a create over a
//     tombstone updates that row. The namespacedefaults controller re-creates
//     a deleted default, as upstream's controllers do.
//   - Watch: a served default appears (ADDED) at the revision that created
//     its namespace, and disappears (DELETED) at the revision that made
//     the namespace terminate (or deleted it). Its first stored write is a
//     MODIFIED of the served object, a tombstone a DELETED, a create over a
//     tombstone an ADDED. Each namespace event yields at most one event per
//     resource at its revision, so watchers resuming from any revision see
//     every change once.
//
// Served objects get their resourceVersion from the namespace's creation
// revision and a UID derived from the namespace's UID, so every replica
// serves the same bytes. Objects per namespace that are not rows are not
// in SQL: docs/sql-auditing.md says how they are counted.
package serveddefaults

import (
	"bytes"
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/google/uuid"
	kineserver "github.com/k3s-io/kine/pkg/server"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// The names of the served defaults, as upstream names them.
const (
	ServiceAccount  = "default"
	RootCAConfigMap = "kube-root-ca.crt"
)

const (
	nsPrefix = "/registry/core/namespaces/"
	// nsEnd is the end of the namespaces' key range.
	nsEnd = "/registry/core/namespaces0"
)

// tombstonePrefix starts the value of a deleted default. The API server
// stores objects as JSON that starts with {"kind": (or {"apiVersion"),
// so no client can write a value that looks like a tombstone.
var tombstonePrefix = []byte(`{"kcp.io/deleted-default":`)

type tombstone struct {
	// NamespaceUID is the namespace whose default was deleted: a namespace
	// of the same name created later serves its default again.
	NamespaceUID string `json:"namespaceUID"`
}

// kind is one served default.
type kind struct {
	resource string // key segment: serviceaccounts, configmaps
	name     string // object name in every namespace
	prefix   string // "/registry/core/<resource>/"
	end      string // end of the resource's key range
	object   func(b *Backend, ns *namespace) any
}

var kinds = []*kind{
	{resource: "serviceaccounts", name: ServiceAccount, object: func(b *Backend, ns *namespace) any {
		return &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{Kind: "ServiceAccount", APIVersion: "v1"}, ObjectMeta: ns.meta("serviceaccounts", ServiceAccount)}
	}},
	{resource: "configmaps", name: RootCAConfigMap, object: func(b *Backend, ns *namespace) any {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: ns.meta("configmaps", RootCAConfigMap),
			Data: map[string]string{"ca.crt": b.caPEM}}
	}},
}

func init() {
	for _, k := range kinds {
		k.prefix = "/registry/core/" + k.resource + "/"
		k.end = "/registry/core/" + k.resource + "0"
	}
}

// Backend is a kine backend that serves the defaults of every namespace.
type Backend struct {
	kineserver.Backend
	caPEM string
}

// New serves the defaults on top of b; caPEM is what kube-root-ca.crt holds
// (the CA every replica's serving certificate is issued from).
func New(b kineserver.Backend, caPEM string) *Backend {
	return &Backend{Backend: b, caPEM: caPEM}
}

// namespace is what a served default depends on.
type namespace struct {
	rest      string // "<cluster>/<name>"
	uid       string
	created   metav1.Time
	createRev int64
	active    bool // live and not terminating
}

func (ns *namespace) cluster() string { c, _, _ := strings.Cut(ns.rest, "/"); return c }
func (ns *namespace) name() string    { _, n, _ := strings.Cut(ns.rest, "/"); return n }

func (ns *namespace) meta(resource, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              name,
		Namespace:         ns.name(),
		UID:               types.UID(uuid.NewSHA1(uuid.NameSpaceURL, []byte("kcp:"+resource+"/"+ns.rest+"/"+name+"/"+ns.uid)).String()),
		CreationTimestamp: ns.created,
		Annotations:       map[string]string{logicalcluster.Annotation: ns.cluster()},
	}
}

// parseNamespace reads a namespace's key-value; nil if kv is not one.
func parseNamespace(kv *kineserver.KeyValue) *namespace {
	if kv == nil || len(kv.Value) == 0 {
		return nil
	}
	rest, ok := strings.CutPrefix(kv.Key, nsPrefix)
	if !ok || strings.Count(rest, "/") != 1 {
		return nil
	}
	var o struct {
		Metadata struct {
			UID               string       `json:"uid"`
			CreationTimestamp metav1.Time  `json:"creationTimestamp"`
			DeletionTimestamp *metav1.Time `json:"deletionTimestamp"`
		} `json:"metadata"`
		Status struct {
			Phase string `json:"phase"`
		} `json:"status"`
	}
	if json.Unmarshal(kv.Value, &o) != nil || o.Metadata.UID == "" {
		return nil
	}
	return &namespace{rest: rest, uid: o.Metadata.UID, created: o.Metadata.CreationTimestamp, createRev: kv.CreateRevision,
		active: o.Metadata.DeletionTimestamp == nil && o.Status.Phase != string(corev1.NamespaceTerminating)}
}

// defaultOf says whether key is a served default's key, and which.
func defaultOf(key string) (*kind, string, bool) {
	for _, k := range kinds {
		rest, ok := strings.CutPrefix(key, k.prefix)
		if !ok {
			continue
		}
		nsRest, name, ok := cutLast(rest)
		if !ok || name != k.name || strings.Count(nsRest, "/") != 1 {
			return nil, "", false
		}
		return k, nsRest, true
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

func (k *kind) key(nsRest string) string { return k.prefix + nsRest + "/" + k.name }

// served is the default of kind k in ns as a stored key-value would be.
func (b *Backend) served(k *kind, ns *namespace) *kineserver.KeyValue {
	v, err := json.Marshal(k.object(b, ns))
	if err != nil {
		panic(err) // plain structs
	}
	return &kineserver.KeyValue{Key: k.key(ns.rest), Value: v, CreateRevision: ns.createRev, ModRevision: ns.createRev, Version: 1}
}

func isTombstone(kv *kineserver.KeyValue) bool {
	return kv != nil && bytes.HasPrefix(kv.Value, tombstonePrefix)
}

func tombstoneOf(kv *kineserver.KeyValue) string {
	var t map[string]tombstone
	if json.Unmarshal(kv.Value, &t) != nil {
		return ""
	}
	return t["kcp.io/deleted-default"].NamespaceUID
}

func tombstoneValue(nsUID string) []byte {
	v, _ := json.Marshal(map[string]tombstone{"kcp.io/deleted-default": {NamespaceUID: nsUID}})
	return v
}

// hides says whether stored (the row at a default's key, possibly nil)
// keeps ns's default from being served.
func hides(stored *kineserver.KeyValue, ns *namespace) bool {
	if stored == nil {
		return false
	}
	return !isTombstone(stored) || tombstoneOf(stored) == ns.uid
}

// state is a default key as clients see it at one revision.
type state struct {
	rev     int64                // the revision read at
	stored  *kineserver.KeyValue // the row, tombstone or not; nil if none
	virtual *kineserver.KeyValue // what clients see; nil if nothing
	ns      *namespace           // the namespace; nil if none
}

func (b *Backend) state(ctx context.Context, k *kind, nsRest string, revision int64) (state, error) {
	rev, stored, err := b.Backend.Get(ctx, k.key(nsRest), revision, false)
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
	_, nskv, err := b.Backend.Get(ctx, nsPrefix+nsRest, at, false)
	if err != nil {
		return s, err
	}
	s.ns = parseNamespace(nskv)
	if s.virtual == nil && s.ns != nil && s.ns.active && !hides(stored, s.ns) {
		s.virtual = b.served(k, s.ns)
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
	k, nsRest, ok := defaultOf(key)
	if !ok {
		return b.Backend.Get(ctx, key, revision, only)
	}
	s, err := b.state(ctx, k, nsRest, revision)
	return s.rev, keysOnly(s.virtual, only), err
}

func (b *Backend) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	k, nsRest, ok := defaultOf(key)
	if !ok {
		return b.Backend.Create(ctx, key, value, lease)
	}
	s, err := b.state(ctx, k, nsRest, 0)
	switch {
	case err != nil:
		return s.rev, err
	case s.virtual != nil:
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
	k, nsRest, ok := defaultOf(key)
	if !ok {
		return b.Backend.Update(ctx, key, value, revision, lease)
	}
	s, err := b.state(ctx, k, nsRest, 0)
	switch {
	case err != nil:
		return s.rev, nil, false, err
	case s.virtual == nil || s.virtual.ModRevision != revision:
		return s.rev, s.virtual, false, nil
	case s.stored != nil && !isTombstone(s.stored):
		return b.Backend.Update(ctx, key, value, revision, lease)
	}
	// The served object becomes a row.
	return b.replace(ctx, k, nsRest, s, value, lease)
}

// replace writes value at a default's key whose served object is s.virtual,
// checked against what is stored there (nothing, or a tombstone).
func (b *Backend) replace(ctx context.Context, k *kind, nsRest string, s state, value []byte, lease int64) (int64, *kineserver.KeyValue, bool, error) {
	var rev int64
	var err error
	if s.stored == nil {
		rev, err = b.Backend.Create(ctx, k.key(nsRest), value, lease)
		if err == kineserver.ErrKeyExists {
			err = nil
			rev = 0
		}
	} else {
		var ok bool
		rev, _, ok, err = b.Backend.Update(ctx, k.key(nsRest), value, s.stored.ModRevision, lease)
		if !ok {
			rev = 0
		}
	}
	if err != nil {
		return rev, nil, false, err
	}
	if rev == 0 { // lost to another write: report what is there now
		now, err := b.state(ctx, k, nsRest, 0)
		return now.rev, now.virtual, false, err
	}
	return rev, &kineserver.KeyValue{Key: k.key(nsRest), Value: value, ModRevision: rev}, true, nil
}

func (b *Backend) Delete(ctx context.Context, key string, revision int64) (int64, *kineserver.KeyValue, bool, error) {
	k, nsRest, ok := defaultOf(key)
	if !ok {
		rev, kv, deleted, err := b.Backend.Delete(ctx, key, revision)
		if err == nil && deleted && strings.HasPrefix(key, nsPrefix) {
			b.dropTombstones(ctx, strings.TrimPrefix(key, nsPrefix))
		}
		return rev, kv, deleted, err
	}
	s, err := b.state(ctx, k, nsRest, 0)
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
	case s.ns == nil || !s.ns.active:
		// Nothing would be served in its place: delete the row.
		return b.Backend.Delete(ctx, key, revision)
	}
	rev, now, ok, err := b.replace(ctx, k, nsRest, s, tombstoneValue(s.ns.uid), 0)
	if err != nil || !ok {
		return rev, now, false, err
	}
	return rev, s.virtual, true, nil
}

// dropTombstones deletes the tombstones of a deleted namespace's defaults
// (their delete events are not shown to anyone: the defaults were deleted
// already). Best effort: a tombstone left behind names the namespace's UID,
// so it hides nothing from a namespace of the same name created later.
func (b *Backend) dropTombstones(ctx context.Context, nsRest string) {
	for _, k := range kinds {
		if _, kv, err := b.Backend.Get(ctx, k.key(nsRest), 0, false); err == nil && isTombstone(kv) {
			_, _, _, _ = b.Backend.Delete(ctx, kv.Key, kv.ModRevision)
		}
	}
}

// overlaps lists the kinds whose key ranges overlap [key, end).
func overlaps(key, end string) []*kind {
	var out []*kind
	for _, k := range kinds {
		if key < k.end && (end == "" || end > k.prefix) {
			out = append(out, k)
		}
	}
	return out
}

func (b *Backend) List(ctx context.Context, key, end string, limit, revision int64, only bool) (int64, []*kineserver.KeyValue, error) {
	if end == "" || len(overlaps(key, end)) == 0 {
		return b.Backend.List(ctx, key, end, limit, revision, only)
	}
	return b.list(ctx, key, end, limit, revision, only)
}

// list merges the stored rows of [key, end) with the served defaults.
//
// Keys sort differently from the namespaces they derive from ("a-b/x" <
// "a/x" but "a" < "a-b"), so a page is built from a window of rows and of
// namespaces, and holds only keys below what the window proves: below the
// last row read when rows were cut off, and below "<last namespace>-" when
// namespaces were (every later namespace's defaults sort above that). kine
// reads a page as complete when it has fewer than limit keys, so a window
// that proves too few keys is widened until it proves limit of them or
// holds everything.
func (b *Backend) list(ctx context.Context, key, end string, limit, revision int64, only bool) (int64, []*kineserver.KeyValue, error) {
	window := limit
	for {
		rev, rows, err := b.Backend.List(ctx, key, end, window, revision, only)
		if err != nil {
			return rev, nil, err
		}
		at := revision
		if at == 0 {
			at = rev
		}
		cut := end // keys below cut are all known
		if window > 0 && int64(len(rows)) >= window {
			cut = rows[len(rows)-1].Key + "\x00"
		}
		stored := map[string]*kineserver.KeyValue{}
		var out []*kineserver.KeyValue
		for _, kv := range rows {
			if _, _, ok := defaultOf(kv.Key); ok {
				stored[kv.Key] = kv
				if isTombstone(kv) {
					continue
				}
			}
			out = append(out, kv)
		}
		for _, k := range overlaps(key, end) {
			lo, hi := max(key, k.prefix), min(end, k.end)
			nsLo := nsPrefix + clusterStart(strings.TrimPrefix(lo, k.prefix))
			nsHi := nsEnd
			if hi < k.end {
				nsHi = nsPrefix + strings.TrimPrefix(hi, k.prefix)
			}
			_, nss, err := b.Backend.List(ctx, nsLo, nsHi, window, at, false)
			if err != nil {
				return rev, nil, err
			}
			if window > 0 && int64(len(nss)) >= window {
				last := strings.TrimPrefix(nss[len(nss)-1].Key, nsPrefix)
				cut = min(cut, k.prefix+last+"-")
			}
			for _, nskv := range nss {
				ns := parseNamespace(nskv)
				if ns == nil || !ns.active {
					continue
				}
				dk := k.key(ns.rest)
				if dk < lo || dk >= hi {
					continue
				}
				// Below cut, the rows read hold every row there is: the
				// map says whether dk is stored.
				if hides(stored[dk], ns) {
					continue
				}
				out = append(out, keysOnly(b.served(k, ns), only))
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
		n := sort.Search(len(out), func(i int) bool { return out[i].Key >= cut })
		out = out[:n]
		if limit <= 0 || int64(len(out)) >= limit || cut == end {
			if limit > 0 && int64(len(out)) > limit {
				out = out[:limit]
			}
			return rev, out, nil
		}
		window *= 2
	}
}

// clusterStart is where the namespaces whose defaults can sort at or after
// a key "<cluster>/<namespace>/<name>" begin: at the cluster's first, since
// every namespace whose name is a prefix of <namespace> ("a" for "a-b")
// sorts before it but has its defaults after it.
func clusterStart(rest string) string {
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i+1]
	}
	return rest
}

func (b *Backend) ListStream(ctx context.Context, key, end string, limit, revision int64, only bool) kineserver.ListResult {
	if end == "" || len(overlaps(key, end)) == 0 {
		return b.Backend.ListStream(ctx, key, end, limit, revision, only)
	}
	rev, kvs, err := b.list(ctx, key, end, limit, revision, only)
	kvc := make(chan *kineserver.KeyValue, len(kvs))
	errc := make(chan error, 1)
	for _, kv := range kvs {
		kvc <- kv
	}
	close(kvc)
	errc <- err
	return kineserver.ListResult{CurrentRevision: rev, KVc: kvc, Errorc: errc}
}

// Count adds the namespaces whose defaults fall in [key, end) to the rows
// there. It is exact unless defaults were changed (counted twice) or
// deleted, or namespaces are terminating: kine uses it only for the
// remaining-item count of a paged list, an estimate in Kubernetes too.
func (b *Backend) Count(ctx context.Context, key, end string, revision int64) (int64, int64, error) {
	rev, n, err := b.Backend.Count(ctx, key, end, revision)
	if err != nil || end == "" {
		return rev, n, err
	}
	for _, k := range overlaps(key, end) {
		lo, hi := max(key, k.prefix), min(end, k.end)
		nsHi := nsEnd
		if hi < k.end {
			nsHi = nsPrefix + strings.TrimPrefix(hi, k.prefix)
		}
		at := revision
		if at == 0 {
			at = rev
		}
		_, c, err := b.Backend.Count(ctx, nsPrefix+clusterStart(strings.TrimPrefix(lo, k.prefix)), nsHi, at)
		if err != nil {
			return rev, n, err
		}
		n += c
	}
	return rev, n, nil
}
