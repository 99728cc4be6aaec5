// Package movepeer is the shard-to-shard API of a workspace move
// (WorkspaceMove, server/controllers/workspacemove): the shard holding the
// workspace freezes it and hands over its stored rows, the new shard writes
// them through kine (storage/restore's Writer: same keys, names, UIDs,
// spec and status; watchers see each write), and the old shard deletes its
// copy once the new one serves. Only another shard may call it: the client
// certificate of the request must be a shard's (PeerUser, group
// PeersGroup), issued by the installation's CA, checked here on the
// connection itself. Request headers (the front proxy's X-Remote-*),
// impersonation and tokens do not count, so neither a tenant nor the front
// proxy can call it.
package movepeer

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/logicalclusters"
	"github.com/kcpsql/kcp/server/shards"
	"github.com/kcpsql/kcp/storage/changehistory"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/restore"
)

// Prefix is where the API is served (outside /clusters/: it is a shard's,
// not a workspace's).
const Prefix = "/kcp-move/v1/"

// Kine is what the API needs of the embedded kine besides restore.Writer.
type Kine interface {
	restore.Writer
	GetKey(ctx context.Context, key string) ([]byte, int64, error)
	CreateKey(ctx context.Context, key string, value []byte) (int64, bool, error)
	UpdateKey(ctx context.Context, key string, value []byte, revision int64) (int64, bool, error)
	Range(ctx context.Context, prefix string, fn func(key string, value []byte, revision int64) error) (int64, error)
	// Settle is a revision up to which every row is final
	// (embeddedkine.Kine.Settle).
	Settle(ctx context.Context) (int64, error)
}

// Server serves the API on one shard.
type Server struct {
	Self     string
	Clusters *logicalclusters.Registry
	Source   restore.Source
	Kine     Kine
	// DeleteClusterData deletes every object of a cluster through the
	// storage layer, its LogicalCluster last.
	DeleteClusterData func(context.Context, logicalcluster.Name) (int, error)
	// CAFile is the installation's CA: peers' certificates are its.
	CAFile string

	once     sync.Once
	roots    *x509.CertPool
	loopback *rest.Config
	mu       sync.Mutex
	clients  *clusterinformer.Clients
}

// SetLoopback gives the server kcp's own identity (to annotate
// LogicalClusters through the API, so that the registry sees it).
func (s *Server) SetLoopback(cfg *rest.Config) {
	if s == nil {
		return
	}
	s.loopback = cfg
}

// Wrap serves the API before next.
func (s *Server) Wrap(next http.Handler) http.Handler {
	if s == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, Prefix) {
			next.ServeHTTP(w, r)
			return
		}
		if who, ok := s.peer(r); !ok {
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s is the shards' own API; only another shard's client certificate may call it (%s)", Prefix, who))
			return
		}
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "POST only")
			return
		}
		s.serve(w, r)
	})
}

// peer reports whether the request's client certificate is a shard's,
// issued by the CA, and what identity it had.
func (s *Server) peer(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "no client certificate", false
	}
	s.once.Do(func() {
		raw, err := os.ReadFile(s.CAFile)
		if err != nil {
			klog.ErrorS(err, "reading the CA for the move API")
			return
		}
		pool := x509.NewCertPool()
		if pool.AppendCertsFromPEM(raw) {
			s.roots = pool
		}
	})
	if s.roots == nil {
		return "no CA", false
	}
	certs := r.TLS.PeerCertificates
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	leaf := certs[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "a certificate the CA did not issue", false
	}
	who := leaf.Subject.CommonName
	if !strings.HasPrefix(who, shards.PeerUser("")) || !slices.Contains(leaf.Subject.Organization, shards.PeersGroup) {
		return "user " + who + " is not a shard", false
	}
	return who, true
}

// Request is the body of every call.
type Request struct {
	Cluster logicalcluster.Name `json:"cluster"`
	// Move is the tenancy.MoveAnnotation of the move (freeze, import).
	Move string `json:"move,omitempty"`
	// Final: export marks the cluster moved first (it stops serving it);
	// import writes the LogicalCluster last (the new shard serves it).
	Final bool `json:"final,omitempty"`
	// Precopy: export while the cluster is still writable (a first copy,
	// so that the frozen copy after it writes only what changed).
	Precopy bool `json:"precopy,omitempty"`
	// Revision (import): the source's revision of the rows (final: when
	// it stopped serving); the target's counter is moved past it.
	Revision int64 `json:"revision,omitempty"`
	// Since (export): only what changed after this revision of the
	// source (a revision an earlier export returned), not every row.
	Since int64 `json:"since,omitempty"`
	// Rows (import): the stored rows, key to value; with Delta only those
	// that changed, Deleted the keys deleted.
	Rows    map[string][]byte `json:"rows,omitempty"`
	Deleted []string          `json:"deleted,omitempty"`
	Delta   bool              `json:"delta,omitempty"`
	// Unclaim (thaw): also end the move's claim on the cluster (after its
	// copy elsewhere was discarded).
	Unclaim bool `json:"unclaim,omitempty"`
	// FromShard and ParentShard (import): where the cluster comes from,
	// where its Workspace is.
	FromShard   string `json:"fromShard,omitempty"`
	ParentShard string `json:"parentShard,omitempty"`
}

// State is what a shard holds of a cluster.
type State struct {
	Exists    bool   `json:"exists"`
	UID       string `json:"uid,omitempty"`
	Move      string `json:"move,omitempty"`
	Claim     string `json:"claim,omitempty"`
	MovedTo   string `json:"movedTo,omitempty"`
	MovedFrom string `json:"movedFrom,omitempty"`
	// Children: whether it holds child workspaces.
	Children bool `json:"children,omitempty"`
}

// Export is the answer of export: the rows of the cluster as of Revision
// (every row up to it is final, embeddedkine.Kine.Settle), its
// LogicalCluster always among them. With Delta, only the rows changed
// after the request's Since and the keys deleted since; Full says why a
// delta asked for was not possible (the answer has every row).
type Export struct {
	Revision int64             `json:"revision"`
	Rows     map[string][]byte `json:"rows"`
	Deleted  []string          `json:"deleted,omitempty"`
	Delta    bool              `json:"delta,omitempty"`
	Full     string            `json:"full,omitempty"`
}

// Result is the answer of import and release.
type Result struct {
	Objects int `json:"objects"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	var req Request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<30)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := logicalcluster.Parse(string(req.Cluster)); err != nil || req.Cluster == logicalcluster.Root || req.Cluster.IsWildcard() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("cluster %q cannot move", req.Cluster))
		return
	}
	ctx := r.Context()
	var out interface{}
	var err error
	switch strings.TrimPrefix(r.URL.Path, Prefix) {
	case "state":
		out, err = s.state(ctx, req.Cluster)
	case "freeze":
		out, err = struct{}{}, s.freeze(ctx, req)
	case "export":
		out, err = s.export(ctx, req)
	case "import":
		out, err = s.importRows(ctx, req)
	case "release":
		out, err = s.release(ctx, req)
	case "discard":
		out, err = s.discard(ctx, req)
	case "thaw":
		out, err = struct{}{}, s.thaw(ctx, req)
	default:
		writeError(w, http.StatusNotFound, "no such call")
		return
	}
	if err != nil {
		code := http.StatusInternalServerError
		var c conflict
		if errors.As(err, &c) {
			code = http.StatusConflict
		}
		writeError(w, code, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// conflict is a call the cluster's state refuses.
type conflict string

func (c conflict) Error() string { return string(c) }

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Message: msg})
}

// storedLC reads the cluster's LogicalCluster row from the datastore (not
// the registry, which may lag).
func (s *Server) storedLC(ctx context.Context, c logicalcluster.Name) (map[string]interface{}, int64, error) {
	raw, rev, err := s.Kine.GetKey(ctx, restore.LogicalClusterKey(c))
	if err != nil || raw == nil {
		return nil, 0, err
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, 0, err
	}
	return obj, rev, nil
}

func (s *Server) state(ctx context.Context, c logicalcluster.Name) (*State, error) {
	obj, _, err := s.storedLC(ctx, c)
	if err != nil || obj == nil {
		return &State{}, err
	}
	u := unstructured.Unstructured{Object: obj}
	a := u.GetAnnotations()
	st := &State{Exists: true, UID: string(u.GetUID()), Move: a[tenancy.MoveAnnotation], Claim: a[tenancy.MoveClaimAnnotation],
		MovedTo: a[tenancy.MovedToAnnotation], MovedFrom: a[tenancy.MovedFromAnnotation]}
	prefix := "/registry/" + tenancy.Group + "/" + tenancy.WorkspacesResource.Resource + "/" + string(c) + "/"
	if _, err := s.Kine.Range(ctx, prefix, func(string, []byte, int64) error { st.Children = true; return errStop }); err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	return st, nil
}

var errStop = errors.New("stop")

func (s *Server) lcClient(c logicalcluster.Name) (dynamic.ResourceInterface, error) {
	if s.loopback == nil {
		return nil, fmt.Errorf("the server is starting")
	}
	s.mu.Lock()
	if s.clients == nil {
		cs, err := clusterinformer.NewClients(s.loopback)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.clients = cs
	}
	clients := s.clients
	s.mu.Unlock()
	d, err := clients.Dynamic(c)
	if err != nil {
		return nil, err
	}
	return d.Resource(tenancy.LogicalClustersResource), nil
}

// annotate sets (value "" removes) an annotation of the cluster's
// LogicalCluster through the API.
func (s *Server) annotate(ctx context.Context, c logicalcluster.Name, key, value string) error {
	lcs, err := s.lcClient(c)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		lc, err := lcs.Get(ctx, tenancy.LogicalClusterName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a := lc.GetAnnotations()
		if a[key] == value {
			return nil
		}
		if a == nil {
			a = map[string]string{}
		}
		if value == "" {
			delete(a, key)
		} else {
			a[key] = value
		}
		lc.SetAnnotations(a)
		_, err = lcs.Update(ctx, lc, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) || attempt == 5 {
			return err
		}
	}
}

// waitFor waits (30 s at most) until the registry shows ok.
func waitFor(ctx context.Context, what string, ok func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not seen within 30 s", what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// freeze makes the cluster read-only for the move (idempotent).
func (s *Server) freeze(ctx context.Context, req Request) error {
	obj, _, err := s.storedLC(ctx, req.Cluster)
	if err != nil {
		return err
	}
	if obj == nil {
		return conflict(fmt.Sprintf("shard %s does not hold logical cluster %s", s.Self, req.Cluster))
	}
	a := (&unstructured.Unstructured{Object: obj}).GetAnnotations()
	if held := a[tenancy.MoveAnnotation]; held != "" && held != req.Move {
		return conflict(fmt.Sprintf("logical cluster %s is being moved by another move (%s)", req.Cluster, held))
	}
	if held := a[tenancy.MoveClaimAnnotation]; held != "" && held != req.Move {
		return conflict(fmt.Sprintf("logical cluster %s is being copied by another move (%s)", req.Cluster, held))
	}
	if a[tenancy.RestoreAnnotation] != "" {
		return conflict(fmt.Sprintf("logical cluster %s is being restored by WorkspaceRestore %s; move it when the restore ends", req.Cluster, a[tenancy.RestoreAnnotation]))
	}
	if held := a[tenancy.MoveAnnotation]; held == "" {
		if err := s.refuseHistory(ctx, req.Cluster); err != nil {
			return err
		}
	}
	if err := s.annotate(ctx, req.Cluster, tenancy.MoveAnnotation, req.Move); err != nil {
		return err
	}
	return waitFor(ctx, "the freeze of "+string(req.Cluster), func() bool { return s.Clusters.FreezeOf(req.Cluster).Move == req.Move })
}

// currentRevision is the datastore's newest revision, as a list answers.
func (s *Server) currentRevision(ctx context.Context) (int64, error) {
	return s.Kine.Range(ctx, "/registry/kcp.io/nothing/", func(string, []byte, int64) error { return nil })
}

// export hands over the cluster's stored rows; final marks it moved first,
// so that it serves nothing more and the revision returned is past every
// resourceVersion a client can hold of it. With Since, only what changed
// after it: the rows are read once, after the cluster stopped serving.
func (s *Server) export(ctx context.Context, req Request) (*Export, error) {
	obj, _, err := s.storedLC(ctx, req.Cluster)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, conflict(fmt.Sprintf("shard %s does not hold logical cluster %s", s.Self, req.Cluster))
	}
	a := (&unstructured.Unstructured{Object: obj}).GetAnnotations()
	if a[tenancy.MoveAnnotation] == "" && !req.Precopy {
		return nil, conflict(fmt.Sprintf("logical cluster %s is not frozen for a move", req.Cluster))
	}
	if req.Precopy && req.Final {
		return nil, conflict("a final export is of a frozen cluster, not a pre-copy")
	}
	if req.Precopy && a[tenancy.MoveAnnotation] == "" {
		if err := s.refuseHistory(ctx, req.Cluster); err != nil {
			return nil, err
		}
		// The claim: one move at a time copies the cluster.
		switch held := a[tenancy.MoveClaimAnnotation]; {
		case held != "" && held != req.Move:
			return nil, conflict(fmt.Sprintf("logical cluster %s is being copied by another move (%s)", req.Cluster, held))
		case held == "":
			if a[tenancy.RestoreAnnotation] != "" {
				return nil, conflict(fmt.Sprintf("logical cluster %s is being restored by WorkspaceRestore %s; move it when the restore ends", req.Cluster, a[tenancy.RestoreAnnotation]))
			}
			if err := s.annotate(ctx, req.Cluster, tenancy.MoveClaimAnnotation, req.Move); err != nil {
				return nil, err
			}
		}
	}
	if req.Final {
		to, _ := tenancy.ParseMove(a[tenancy.MoveAnnotation])
		if err := s.annotate(ctx, req.Cluster, tenancy.MovedToAnnotation, to); err != nil {
			return nil, err
		}
		if err := waitFor(ctx, "the end of serving "+string(req.Cluster), func() bool { return s.Clusters.MovedTo(req.Cluster) != "" }); err != nil {
			return nil, err
		}
	}
	// Every row up to rev is final: what changed after it is exactly what
	// has a greater revision, which the next export (Since: rev) sends.
	rev, err := s.Kine.Settle(ctx)
	if err != nil {
		return nil, err
	}
	full := ""
	if req.Since > 0 {
		d, err := s.Source.Changed(ctx, req.Cluster, req.Since)
		switch {
		case err == nil:
			lcKey := restore.LogicalClusterKey(req.Cluster)
			if _, ok := d.Changed[lcKey]; !ok {
				raw, _, err := s.Kine.GetKey(ctx, lcKey)
				if err != nil {
					return nil, err
				}
				d.Changed[lcKey] = raw
			}
			return &Export{Revision: rev, Rows: d.Changed, Deleted: d.Deleted, Delta: true}, nil
		case restore.IsCompactedSince(err):
			full = err.Error()
			klog.InfoS("A move's copy compares whole states: the changes since the pre-copy cannot be told", "cluster", req.Cluster, "since", req.Since, "reason", full)
		default:
			return nil, err
		}
	}
	lives, err := s.Source.Live(ctx, req.Cluster)
	if err != nil {
		return nil, err
	}
	return &Export{Revision: rev, Rows: restore.Values(lives), Full: full}, nil
}

// refuseHistory refuses to move a cluster whose shard records the change
// history (kcp start --change-history): a move does not copy kcp_changes,
// so the new shard could not restore the workspace to a point before the
// move, and the history here would be deleted with the old copy.
func (s *Server) refuseHistory(ctx context.Context, c logicalcluster.Name) error {
	if s.Source.DB == nil {
		return nil
	}
	cov, err := changehistory.Covered(ctx, s.Source.DB, s.Source.Dialect)
	if err != nil {
		return fmt.Errorf("reading whether shard %s records the change history: %w", s.Self, err)
	}
	if cov.On {
		return conflict(fmt.Sprintf("shard %s records the change history (kcp start --change-history) and a move does not copy it yet: "+
			"moving %s would lose its history (WorkspaceRestore to a point before the move); not moved. "+
			"Move it with the history off on shard %s, or keep it there", s.Self, c, s.Self))
	}
	return nil
}

// floorKey is a key outside every workspace whose writes move this
// datastore's revision counter past another shard's.
const floorKey = "/registry/kcp.io/revisionfloor/system:shard/floor"

// passRevision makes this datastore's next revision greater than rev, by
// writes of floorKey (kine gives every write the next revision and fills
// any gap with a row per revision, so there is no cheaper jump).
func (s *Server) passRevision(ctx context.Context, rev int64) (int, error) {
	writes := 0
	for {
		cur, err := s.currentRevision(ctx)
		if err != nil {
			return writes, err
		}
		if cur > rev {
			return writes, nil
		}
		value := []byte(fmt.Sprintf(`{"revision":%d}`, rev))
		_, old, err := s.Kine.GetKey(ctx, floorKey)
		if err != nil {
			return writes, err
		}
		for cur <= rev {
			if old == 0 {
				cur, _, err = s.Kine.CreateKey(ctx, floorKey, value)
			} else {
				var ok bool
				cur, ok, err = s.Kine.UpdateKey(ctx, floorKey, value, old)
				if err == nil && !ok {
					break
				}
			}
			if err != nil {
				return writes, err
			}
			old = cur
			writes++
		}
	}
}

// importRows writes the rows of a cluster; final writes its LogicalCluster
// last, after the revision counter passed the source's, so that every
// resourceVersion of the source is older than the cluster's creation here
// (server/incarnations answers 410 Gone to a watch from one).
func (s *Server) importRows(ctx context.Context, req Request) (*Result, error) {
	lcKey := restore.LogicalClusterKey(req.Cluster)
	lcRaw, ok := req.Rows[lcKey]
	if !ok {
		return nil, fmt.Errorf("the rows of %s have no LogicalCluster", req.Cluster)
	}
	var lc map[string]interface{}
	if err := json.Unmarshal(lcRaw, &lc); err != nil {
		return nil, err
	}
	uid := string((&unstructured.Unstructured{Object: lc}).GetUID())
	if obj, _, err := s.storedLC(ctx, req.Cluster); err != nil {
		return nil, err
	} else if obj != nil {
		here := &unstructured.Unstructured{Object: obj}
		if string(here.GetUID()) == uid {
			return &Result{}, nil // imported before
		}
		return nil, conflict(fmt.Sprintf("shard %s already holds another logical cluster %s (UID %s)", s.Self, req.Cluster, here.GetUID()))
	}
	written := 0
	for pass := 0; pass < 5; pass++ {
		var plan *restore.Plan
		var err error
		if req.Delta {
			plan, err = s.Source.PlanDelta(ctx, req.Cluster, &restore.Delta{Changed: req.Rows, Deleted: req.Deleted})
		} else {
			plan, err = s.Source.PlanInto(ctx, req.Rows, req.Cluster, req.Cluster)
		}
		if err != nil {
			return nil, err
		}
		n, moved, err := restore.Apply(ctx, s.Kine, plan, nil)
		written += n
		if err != nil {
			return nil, err
		}
		if len(moved) == 0 {
			break
		}
	}
	if !req.Final {
		// Moving the counter now, while the workspace is writable, leaves
		// the final import only the source's writes since to pass.
		if req.Revision > 0 {
			if _, err := s.passRevision(ctx, req.Revision); err != nil {
				return nil, fmt.Errorf("moving the revision past the source's %d: %w", req.Revision, err)
			}
		}
		return &Result{Objects: written}, nil
	}
	bumps, err := s.passRevision(ctx, req.Revision)
	if err != nil {
		return nil, fmt.Errorf("moving the revision past the source's %d: %w", req.Revision, err)
	}
	u := &unstructured.Unstructured{Object: lc}
	a := u.GetAnnotations()
	delete(a, tenancy.MoveAnnotation)
	delete(a, tenancy.MoveClaimAnnotation)
	delete(a, tenancy.MovedToAnnotation)
	a[tenancy.MovedFromAnnotation] = fmt.Sprintf("%s@%d", req.FromShard, req.Revision)
	u.SetAnnotations(a)
	// The shard data finalizer holds a cluster whose Workspace is on
	// another shard (server/controllers/workspace).
	const finalizer = "tenancy.kcp.io/shard-data"
	fins := slices.DeleteFunc(u.GetFinalizers(), func(f string) bool { return f == finalizer })
	if req.ParentShard != "" && req.ParentShard != s.Self {
		_ = unstructured.SetNestedField(u.Object, req.ParentShard, "spec", "owner", "shard")
		fins = append(fins, finalizer)
	} else {
		unstructured.RemoveNestedField(u.Object, "spec", "owner", "shard")
	}
	u.SetFinalizers(fins)
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	if _, err := s.Kine.CreateRow(ctx, lcKey, raw); err != nil {
		return nil, err
	}
	klog.InfoS("Moved a logical cluster in", "cluster", req.Cluster, "from", req.FromShard, "objects", len(req.Rows), "sourceRevision", req.Revision, "revisionWrites", bumps)
	return &Result{Objects: len(req.Rows)}, nil
}

// release deletes the copy a move left behind (idempotent).
func (s *Server) release(ctx context.Context, req Request) (*Result, error) {
	obj, _, err := s.storedLC(ctx, req.Cluster)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return &Result{}, nil
	}
	if (&unstructured.Unstructured{Object: obj}).GetAnnotations()[tenancy.MovedToAnnotation] == "" {
		return nil, conflict(fmt.Sprintf("logical cluster %s on shard %s is not marked moved: not deleting it", req.Cluster, s.Self))
	}
	n, err := s.DeleteClusterData(ctx, req.Cluster)
	if err != nil {
		return nil, err
	}
	klog.InfoS("Deleted a moved logical cluster", "cluster", req.Cluster, "objects", n)
	return &Result{Objects: n}, nil
}

// discard deletes a copy of a cluster that a move wrote here and that
// this shard does not serve (it has no LogicalCluster here: the move had
// not switched): what a failed or withdrawn move leaves behind
// (idempotent). Rows are deleted through kine, as any deletion.
func (s *Server) discard(ctx context.Context, req Request) (*Result, error) {
	obj, _, err := s.storedLC(ctx, req.Cluster)
	if err != nil {
		return nil, err
	}
	if obj != nil {
		return nil, conflict(fmt.Sprintf("shard %s serves logical cluster %s (UID %s): not discarding it", s.Self, req.Cluster, (&unstructured.Unstructured{Object: obj}).GetUID()))
	}
	n, err := s.DeleteClusterData(ctx, req.Cluster)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		klog.InfoS("Deleted the partial copy of a move that did not complete", "cluster", req.Cluster, "objects", n, "move", req.Move)
	}
	return &Result{Objects: n}, nil
}

// thaw ends a move's hold on a cluster that the move did not switch: it
// serves it again (moved-to removed) and takes writes again (the freeze
// removed); with Unclaim another move may copy it again. Only the move
// that holds it may (idempotent).
func (s *Server) thaw(ctx context.Context, req Request) error {
	obj, _, err := s.storedLC(ctx, req.Cluster)
	if err != nil || obj == nil {
		return err
	}
	a := (&unstructured.Unstructured{Object: obj}).GetAnnotations()
	held, claim := a[tenancy.MoveAnnotation], a[tenancy.MoveClaimAnnotation]
	if held != req.Move && claim != req.Move {
		if held == "" && claim == "" {
			return nil
		}
		return conflict(fmt.Sprintf("logical cluster %s is held by another move (%s), not by %s", req.Cluster, held+claim, req.Move))
	}
	// Served again first (frozen, readable), then writable, then free
	// for another move.
	keys := []string{tenancy.MovedToAnnotation, tenancy.MoveAnnotation}
	if req.Unclaim {
		keys = append(keys, tenancy.MoveClaimAnnotation)
	}
	for _, key := range keys {
		if err := s.annotate(ctx, req.Cluster, key, ""); err != nil {
			return err
		}
	}
	return waitFor(ctx, "the thaw of "+string(req.Cluster), func() bool {
		return s.Clusters.MovedTo(req.Cluster) == "" && s.Clusters.FreezeOf(req.Cluster).Move == ""
	})
}
