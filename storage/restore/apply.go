package restore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

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

// Combine is one plan of the writes of several (of different clusters),
// in write order.
func Combine(plans ...*Plan) *Plan {
	out := &Plan{}
	for _, p := range plans {
		if out.Cluster == "" {
			out.Cluster, out.Revision = p.Cluster, p.Revision
		}
		out.Changes = append(out.Changes, p.Changes...)
	}
	order(out.Changes)
	return out
}
