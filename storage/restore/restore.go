// Package restore brings one logical cluster back to its state at an
// earlier revision, from the change history (kcp_changes, an undo log: each
// row holds the object before and after one write). The state of a key at
// revision R is the object before its first change after R, so a restore
// needs only the history written after R; keys not changed since R are not
// touched.
//
// A plan is computed with SQL reads of our table and of kine's (read only)
// and applied as writes through kine (Writer), each checked against the
// key's current revision, so watchers see every change as an event and
// resourceVersions only move forward (DESIGN.md rule 6). Applying is
// idempotent: a plan recomputed after a crash or a concurrent write is the
// rest of the work.
package restore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/kcpsql/kcp/storage/changehistory"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/serveddefaults"
)

// Action is what a restore does to one key.
type Action string

const (
	Create Action = "create"
	Update Action = "update"
	Delete Action = "delete"
)

// Change is one write of a plan.
type Change struct {
	Key    string
	Action Action
	// Value is the object to store (create, update).
	Value []byte
	// Revision is the key's current revision (update, delete).
	Revision int64
	// stage orders writes: those of one stage are independent.
	stage int
}

// Plan is what a restore of Cluster to Revision writes.
type Plan struct {
	Cluster  logicalcluster.Name
	Revision int64
	Changes  []Change
}

// Refused is a restore the history cannot serve; Earliest is the oldest
// revision it can restore to (0 when none).
type Refused struct {
	Reason       string
	Earliest     int64
	EarliestTime time.Time
}

func (r *Refused) Error() string {
	if r.Earliest == 0 {
		return r.Reason
	}
	at := ""
	if !r.EarliestTime.IsZero() {
		at = " (" + r.EarliestTime.UTC().Format(time.RFC3339) + ")"
	}
	return fmt.Sprintf("%s; the earliest point it can restore to is revision %d%s", r.Reason, r.Earliest, at)
}

// IsRefused reports whether err is a Refused.
func IsRefused(err error) bool {
	var r *Refused
	return errors.As(err, &r)
}

// Source reads what a plan needs from the datastore.
type Source struct {
	DB      *sql.DB
	Dialect datastore.Dialect
}

var (
	firstChangesSQL = map[datastore.Dialect]string{
		datastore.SQLite: `SELECT c.key, c.revision, c.operation, c.prev_revision, c.old_object
			FROM kcp_changes AS c
			JOIN (SELECT key, MIN(revision) AS first FROM kcp_changes WHERE cluster = ? AND revision > ? GROUP BY key) AS f
			ON c.key = f.key AND c.revision = f.first
			WHERE c.cluster = ?`,
		datastore.Postgres: `SELECT c.key, c.revision, c.operation, c.prev_revision, c.old_object
			FROM kcp_changes AS c
			JOIN (SELECT key, MIN(revision) AS first FROM kcp_changes WHERE cluster = $1 AND revision > $2 GROUP BY key) AS f
			ON c.key = f.key AND c.revision = f.first
			WHERE c.cluster = $3`,
	}
	liveRowsSQL = map[datastore.Dialect]string{
		datastore.SQLite: `SELECT k.name, k.id, k.value FROM kine AS k
			WHERE k.cluster = ? AND k.deleted = 0
			AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)`,
		datastore.Postgres: `SELECT k.name, k.id, k.value FROM kine AS k
			WHERE k.cluster = $1 AND k.deleted = 0
			AND k.id = (SELECT MAX(l.id) FROM kine AS l WHERE l.cluster = k.cluster AND l.name = k.name)`,
	}
	createdSQL = map[datastore.Dialect]string{
		datastore.SQLite: `SELECT CASE WHEN created <> 0 THEN id ELSE create_revision END, deleted FROM kine
			WHERE name = ? ORDER BY id DESC LIMIT 1`,
		datastore.Postgres: `SELECT CASE WHEN created <> 0 THEN id ELSE create_revision END, deleted FROM kine
			WHERE name = $1 ORDER BY id DESC LIMIT 1`,
	}
	revisionAtSQL = map[datastore.Dialect]string{
		datastore.SQLite:   `SELECT MAX(revision) FROM kcp_changes WHERE changed_at <= ?`,
		datastore.Postgres: `SELECT MAX(revision) FROM kcp_changes WHERE changed_at <= $1`,
	}
	timeOfSQL = map[datastore.Dialect]string{
		datastore.SQLite:   `SELECT changed_at FROM kcp_changes WHERE revision >= ? ORDER BY revision LIMIT 1`,
		datastore.Postgres: `SELECT changed_at FROM kcp_changes WHERE revision >= $1 ORDER BY revision LIMIT 1`,
	}
	newestSQL = `SELECT COALESCE(MAX(id), 0) FROM kine`
)

// LogicalClusterKey is the key of a cluster's LogicalCluster: its identity,
// never restored.
func LogicalClusterKey(c logicalcluster.Name) string {
	return "/registry/tenancy.kcp.io/logicalclusters/" + string(c) + "/cluster"
}

// skipped are keys a restore leaves as they are: the cluster's identity
// (its LogicalCluster, which also carries the freeze) and its child
// workspaces (each is restored by a restore of its own).
func skipped(c logicalcluster.Name, key string) bool {
	return key == LogicalClusterKey(c) || strings.HasPrefix(key, "/registry/tenancy.kcp.io/workspaces/"+string(c)+"/")
}

// Began is the revision that created the cluster's current incarnation
// (its LogicalCluster); 0 when the cluster does not exist.
func (s Source) Began(ctx context.Context, c logicalcluster.Name) (int64, error) {
	var created, deleted int64
	err := s.DB.QueryRowContext(ctx, createdSQL[s.Dialect], LogicalClusterKey(c)).Scan(&created, &deleted)
	if err == sql.ErrNoRows || (err == nil && deleted != 0) {
		return 0, nil
	}
	return created, err
}

// RevisionAt is the newest revision written at or before t.
func (s Source) RevisionAt(ctx context.Context, t time.Time) (int64, bool, error) {
	var rev sql.NullInt64
	if err := s.DB.QueryRowContext(ctx, revisionAtSQL[s.Dialect], changehistory.Timestamp(s.Dialect, t)).Scan(&rev); err != nil {
		return 0, false, err
	}
	return rev.Int64, rev.Valid, nil
}

// TimeOf is when the first recorded write at or after rev happened (zero
// when none is recorded).
func (s Source) TimeOf(ctx context.Context, rev int64) time.Time {
	var at any
	if err := s.DB.QueryRowContext(ctx, timeOfSQL[s.Dialect], rev).Scan(&at); err != nil {
		return time.Time{}
	}
	switch v := at.(type) {
	case time.Time:
		return v
	case string:
		t, _ := time.Parse("2006-01-02T15:04:05.000Z", v)
		return t
	case []byte:
		t, _ := time.Parse("2006-01-02T15:04:05.000Z", string(v))
		return t
	}
	return time.Time{}
}

// Newest is the datastore's newest revision.
func (s Source) Newest(ctx context.Context) (int64, error) {
	var rev int64
	err := s.DB.QueryRowContext(ctx, newestSQL).Scan(&rev)
	return rev, err
}

// Earliest is the oldest revision cluster c can be restored to, and why
// not older; 0 when the history cannot restore it at all.
func (s Source) Earliest(ctx context.Context, c logicalcluster.Name) (int64, string, error) {
	cov, err := changehistory.Covered(ctx, s.DB, s.Dialect)
	if err != nil {
		return 0, "", err
	}
	if !cov.On {
		return 0, "the change history is off (kcp start --change-history records it)", nil
	}
	began, err := s.Began(ctx, c)
	if err != nil {
		return 0, "", err
	}
	if began == 0 {
		return 0, fmt.Sprintf("logical cluster %s does not exist", c), nil
	}
	if began > cov.From {
		return began, fmt.Sprintf("%s was created at revision %d (an earlier workspace of the same name is not restorable into it)", c, began), nil
	}
	return cov.From, fmt.Sprintf("the change history reaches back to revision %d (recorded since then, older history pruned by --change-history-retention)", cov.From), nil
}

// Check refuses a restore of c to rev that the history cannot serve.
func (s Source) Check(ctx context.Context, c logicalcluster.Name, rev int64) error {
	earliest, why, err := s.Earliest(ctx, c)
	if err != nil {
		return err
	}
	if earliest == 0 {
		return &Refused{Reason: "cannot restore " + string(c) + ": " + why}
	}
	if rev < earliest {
		return &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: %s", c, rev, why), Earliest: earliest, EarliestTime: s.TimeOf(ctx, earliest)}
	}
	return nil
}

type live struct {
	rev   int64
	value []byte
}

type first struct {
	rev, prev int64
	op        string
	old       []byte
}

// PlanTo computes what restoring c to revision rev writes. It refuses
// (Refused) when the history misses a change after rev.
func (s Source) PlanTo(ctx context.Context, c logicalcluster.Name, rev int64) (*Plan, error) {
	if err := s.Check(ctx, c, rev); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		plan, again, err := s.planOnce(ctx, c, rev)
		if err != nil || !again {
			return plan, err
		}
		if attempt == 4 {
			return nil, fmt.Errorf("%s kept changing while its restore was planned", c)
		}
	}
}

// planOnce plans from one read of the history and one of the live rows;
// again reports a write between the two reads (plan again).
func (s Source) planOnce(ctx context.Context, c logicalcluster.Name, rev int64) (*Plan, bool, error) {
	// History first, live rows second: a write between the two reads is
	// in both or only in the live rows, which the checks below tell.
	firsts, lives, err := s.read(ctx, c, rev)
	if err != nil {
		return nil, false, err
	}
	plan := &Plan{Cluster: c, Revision: rev}
	incomplete := func(key, why string) error {
		return &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: the change history misses a change of %s (%s); it was off or pruned after that revision", c, rev, key, why)}
	}
	for key, f := range firsts {
		if skipped(c, key) {
			continue
		}
		l, isLive := lives[key]
		if f.prev < 0 || f.prev > rev {
			return nil, false, incomplete(key, fmt.Sprintf("its first recorded change after %d, at %d, follows one at %d", rev, f.rev, f.prev))
		}
		var want []byte
		if f.op != "create" {
			if f.old == nil {
				return nil, false, incomplete(key, "no earlier object recorded")
			}
			want = f.old
		}
		switch {
		case want == nil && isLive:
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Delete, Revision: l.rev})
		case want != nil && !isLive:
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Create, Value: want})
		case want != nil && isLive && !bytes.Equal(want, l.value):
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Update, Value: want, Revision: l.rev})
		}
	}
	for key, l := range lives {
		if _, ok := firsts[key]; !ok && l.rev > rev && !skipped(c, key) {
			// Written after the history was read, or never recorded.
			if err := s.recordedSince(ctx, c, key, rev); err != nil {
				return nil, false, err
			}
			return nil, true, nil
		}
	}
	order(plan.Changes)
	return plan, false, nil
}

// recordedSince tells a key written after the history was read (recorded
// now) from one whose change was never recorded.
func (s Source) recordedSince(ctx context.Context, c logicalcluster.Name, key string, rev int64) error {
	q := `SELECT COUNT(*) FROM kcp_changes WHERE cluster = ? AND key = ? AND revision > ?`
	if s.Dialect == datastore.Postgres {
		q = `SELECT COUNT(*) FROM kcp_changes WHERE cluster = $1 AND key = $2 AND revision > $3`
	}
	var n int
	if err := s.DB.QueryRowContext(ctx, q, string(c), key, rev).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: %s was changed after it and the change history has no record of it (recording was off)", c, rev, key)}
	}
	return nil
}

// Writer writes through kine, each write checked against the key's
// current revision (false: the key changed meanwhile, nothing written).
type Writer interface {
	CreateRow(ctx context.Context, key string, value []byte) (bool, error)
	UpdateRow(ctx context.Context, key string, value []byte, revision int64) (bool, error)
	DeleteRow(ctx context.Context, key string, revision int64) (bool, error)
}

// Progress is told after each write.
type Progress func(done, total int)

// Workers is how many writes of one stage Apply runs at once: writes of
// a stage (CRDs, namespaces, objects at one owner depth, deletions) do not
// depend on each other, and on PostgreSQL each is a round trip.
var Workers = 8

// Apply writes a plan, stage by stage, the writes of a stage in parallel;
// it returns how many writes were stored and the changes that found their
// key changed meanwhile (to plan again).
func Apply(ctx context.Context, w Writer, plan *Plan, progress Progress) (int, []Change, error) {
	var mu sync.Mutex
	done, finished := 0, 0
	var moved []Change
	var firstErr error
	write := func(ch Change) {
		var ok bool
		var err error
		switch ch.Action {
		case Create:
			ok, err = w.CreateRow(ctx, ch.Key, ch.Value)
		case Update:
			ok, err = w.UpdateRow(ctx, ch.Key, ch.Value, ch.Revision)
		case Delete:
			ok, err = w.DeleteRow(ctx, ch.Key, ch.Revision)
		}
		mu.Lock()
		defer mu.Unlock()
		finished++
		switch {
		case err != nil:
			if firstErr == nil {
				firstErr = fmt.Errorf("%s %s: %w", ch.Action, ch.Key, err)
			}
		case ok:
			done++
		default:
			moved = append(moved, ch)
		}
		if progress != nil {
			progress(finished, len(plan.Changes))
		}
	}
	for start := 0; start < len(plan.Changes); {
		end := start + 1
		for end < len(plan.Changes) && plan.Changes[end].stage == plan.Changes[start].stage {
			end++
		}
		next := make(chan Change)
		var wg sync.WaitGroup
		for range min(Workers, end-start) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ch := range next {
					write(ch)
				}
			}()
		}
		for _, ch := range plan.Changes[start:end] {
			mu.Lock()
			failed := firstErr != nil
			mu.Unlock()
			if failed || ctx.Err() != nil {
				break
			}
			next <- ch
		}
		close(next)
		wg.Wait()
		if firstErr != nil {
			return done, moved, firstErr
		}
		if err := ctx.Err(); err != nil {
			return done, moved, err
		}
		start = end
	}
	return done, moved, nil
}

// Key is a storage key's parts.
type Key struct {
	Group, Resource, Namespace, Name string
}

// ParseKey splits /registry/<group>/<resource>/<cluster>/[<namespace>/]<name>.
func ParseKey(key string) Key {
	f := strings.Split(strings.TrimPrefix(key, "/registry/"), "/")
	var k Key
	if len(f) >= 2 {
		k.Group, k.Resource = f[0], f[1]
		if i := strings.IndexByte(k.Resource, ':'); i >= 0 {
			k.Resource = k.Resource[:i] // a bound API's identity
		}
	}
	switch len(f) {
	case 4:
		k.Name = f[3]
	case 5:
		k.Namespace, k.Name = f[3], f[4]
	}
	return k
}

// GroupResource is "<resource>" for the core group, else "<resource>.<group>".
func (k Key) GroupResource() string {
	if k.Group == "core" || k.Group == "" {
		return k.Resource
	}
	return k.Resource + "." + k.Group
}

// order sorts writes so that what others need exists first: CRDs, then
// namespaces, then objects before the objects they own; deletions after
// the writes, owned objects first, namespaces and CRDs last.
func order(changes []Change) {
	depth := ownerDepths(changes)
	rank := func(ch Change) int {
		k := ParseKey(ch.Key)
		base := 2 + depth[ch.Key]
		switch {
		case k.Group == "apiextensions.k8s.io" && k.Resource == "customresourcedefinitions":
			base = 0
		case k.Group == "core" && k.Resource == "namespaces":
			base = 1
		}
		if ch.Action == Delete {
			return 1000 - base
		}
		return base
	}
	for i := range changes {
		changes[i].stage = rank(changes[i])
	}
	sort.SliceStable(changes, func(i, j int) bool {
		if changes[i].stage != changes[j].stage {
			return changes[i].stage < changes[j].stage
		}
		return changes[i].Key < changes[j].Key
	})
}

type meta struct {
	Metadata struct {
		UID             string `json:"uid"`
		OwnerReferences []struct {
			UID string `json:"uid"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
}

// ownerDepths: 0 for an object none of whose owners is written by the
// plan, else one more than its deepest owner there.
func ownerDepths(changes []Change) map[string]int {
	byUID := map[string]string{}
	owners := map[string][]string{}
	for _, ch := range changes {
		if ch.Value == nil {
			continue
		}
		var m meta
		if json.Unmarshal(ch.Value, &m) != nil {
			continue
		}
		if m.Metadata.UID != "" {
			byUID[m.Metadata.UID] = ch.Key
		}
		for _, o := range m.Metadata.OwnerReferences {
			owners[ch.Key] = append(owners[ch.Key], o.UID)
		}
	}
	depth := map[string]int{}
	var walk func(key string, seen int) int
	walk = func(key string, seen int) int {
		if d, ok := depth[key]; ok {
			return d
		}
		d := 0
		if seen < 16 { // ownership cycles are invalid; do not loop on one
			for _, uid := range owners[key] {
				if owner, ok := byUID[uid]; ok && owner != key {
					d = max(d, 1+walk(owner, seen+1))
				}
			}
		}
		depth[key] = d
		return d
	}
	for _, ch := range changes {
		walk(ch.Key, 0)
	}
	return depth
}

// StateAt is every stored row of c as it was at revision rev (keys of
// c, values as stored), from the live rows and the history after rev.
func (s Source) StateAt(ctx context.Context, c logicalcluster.Name, rev int64) (map[string][]byte, error) {
	if err := s.Check(ctx, c, rev); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		firsts, lives, err := s.read(ctx, c, rev)
		if err != nil {
			return nil, err
		}
		state := map[string][]byte{}
		again := false
		for key, l := range lives {
			if skipped(c, key) {
				continue
			}
			if _, changed := firsts[key]; !changed {
				if l.rev > rev {
					if err := s.recordedSince(ctx, c, key, rev); err != nil {
						return nil, err
					}
					again = true
					break
				}
				state[key] = l.value
			}
		}
		if again {
			continue
		}
		for key, f := range firsts {
			if skipped(c, key) {
				continue
			}
			if f.prev < 0 || f.prev > rev {
				return nil, &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: the change history misses a change of %s; it was off or pruned after that revision", c, rev, key)}
			}
			if f.op != "create" {
				if f.old == nil {
					return nil, &Refused{Reason: fmt.Sprintf("cannot restore %s to revision %d: no earlier object of %s is recorded", c, rev, key)}
				}
				state[key] = f.old
			}
		}
		return state, nil
	}
	return nil, fmt.Errorf("%s kept changing while its state was read", c)
}

// read is one read of the history after rev and one of the live rows.
func (s Source) read(ctx context.Context, c logicalcluster.Name, rev int64) (map[string]first, map[string]live, error) {
	firsts := map[string]first{}
	rows, err := s.DB.QueryContext(ctx, firstChangesSQL[s.Dialect], string(c), rev, string(c))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the change history of %s: %w", c, err)
	}
	for rows.Next() {
		var key, op string
		var r int64
		var prev sql.NullInt64
		var old []byte
		if err := rows.Scan(&key, &r, &op, &prev, &old); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if !prev.Valid {
			prev.Int64 = -1
		}
		firsts[key] = first{rev: r, prev: prev.Int64, op: op, old: old}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	lives, err := s.Live(ctx, c)
	return firsts, lives, err
}

// Live is every live row of c.
func (s Source) Live(ctx context.Context, c logicalcluster.Name) (map[string]live, error) {
	lives := map[string]live{}
	rows, err := s.DB.QueryContext(ctx, liveRowsSQL[s.Dialect], string(c))
	if err != nil {
		return nil, fmt.Errorf("reading the objects of %s: %w", c, err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var l live
		if err := rows.Scan(&key, &l.rev, &l.value); err != nil {
			return nil, err
		}
		lives[key] = l
	}
	return lives, rows.Err()
}

// PlanInto computes the writes that make cluster into hold state, the rows
// of cluster from (keys of from). Into another cluster, keys and the
// objects' cluster annotation are rewritten for into, and each object gets a UID of its own (derived
// from its UID and into, so that planning again gives the same), its
// owner references following. Objects of into that state does not have
// are deleted; its LogicalCluster and child workspaces are left alone.
func (s Source) PlanInto(ctx context.Context, state map[string][]byte, from, into logicalcluster.Name) (*Plan, error) {
	lives, err := s.Live(ctx, into)
	if err != nil {
		return nil, err
	}
	want := map[string][]byte{}
	for key, value := range state {
		if from == into {
			// In place (a snapshot of the cluster itself): rows as stored.
			if ClusterOfKey(key) == string(into) && !skipped(into, key) {
				want[key] = value
			}
			continue
		}
		k, ok := moveKey(key, from, into)
		if !ok || skipped(into, k) {
			continue
		}
		v, err := moveObject(value, into)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		want[k] = v
	}
	plan := &Plan{Cluster: into}
	for key, v := range want {
		l, isLive := lives[key]
		switch {
		case !isLive:
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Create, Value: v})
		case !bytes.Equal(l.value, v):
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Update, Value: v, Revision: l.rev})
		}
	}
	for key, l := range lives {
		if _, ok := want[key]; !ok && !skipped(into, key) {
			plan.Changes = append(plan.Changes, Change{Key: key, Action: Delete, Revision: l.rev})
		}
	}
	order(plan.Changes)
	return plan, nil
}

// ClusterOfKey is a key's cluster (its 5th '/'-field).
func ClusterOfKey(key string) string {
	f := strings.SplitN(key, "/", 6)
	if len(f) < 6 {
		return ""
	}
	return f[4]
}

// moveKey puts into in place of from as the key's cluster (5th field).
func moveKey(key string, from, into logicalcluster.Name) (string, bool) {
	f := strings.SplitN(key, "/", 6)
	if len(f) < 6 || f[4] != string(from) {
		return "", false
	}
	f[4] = string(into)
	return strings.Join(f, "/"), true
}

// moveObject rewrites a stored object for cluster into: its cluster
// annotation, its UID and the UIDs its owner references name.
func moveObject(value []byte, into logicalcluster.Name) ([]byte, error) {
	if serveddefaults.IsTombstone(value) {
		// A deleted served default names the UID of its namespace.
		var t map[string]map[string]string
		if err := json.Unmarshal(value, &t); err != nil {
			return nil, err
		}
		for _, fields := range t {
			for k, uid := range fields {
				fields[k] = MovedUID(into, uid)
			}
		}
		return json.Marshal(t)
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(value, &obj); err != nil {
		return nil, err
	}
	md, _ := obj["metadata"].(map[string]interface{})
	if md == nil {
		return value, nil
	}
	ann, _ := md["annotations"].(map[string]interface{})
	if ann == nil {
		ann = map[string]interface{}{}
	}
	ann[ClusterAnnotation] = string(into)
	md["annotations"] = ann
	if uid, ok := md["uid"].(string); ok && uid != "" {
		md["uid"] = MovedUID(into, uid)
	}
	if refs, ok := md["ownerReferences"].([]interface{}); ok {
		for _, r := range refs {
			if ref, ok := r.(map[string]interface{}); ok {
				if uid, ok := ref["uid"].(string); ok && uid != "" {
					ref["uid"] = MovedUID(into, uid)
				}
			}
		}
	}
	return json.Marshal(obj)
}

// ClusterAnnotation is the annotation the storage layer writes on every
// object: its logical cluster.
const ClusterAnnotation = "kcp.io/cluster"

// MovedUID is the UID an object of UID uid gets in a copy into cluster
// into: the same for the same pair, distinct from uid.
func MovedUID(into logicalcluster.Name, uid string) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(string(into)+"/"+uid)).String()
}
