// Package workspacelimits is the admission plugin that caps what one
// workspace stores, so that one tenant cannot fill the shared database: live
// objects and bytes of stored JSON, counted as the SQL view
// kcp_cluster_footprint counts them. The caps come from the Workspace's
// spec.limits in its parent (copied to the LogicalCluster; the tenant
// inside can change neither) or else from the server's flags
// --workspace-max-objects and --workspace-max-bytes. Root is not capped.
//
// Setting or changing a Workspace's spec.limits needs the verb "update" on
// that workspace granted by the parent's RBAC: the creator's own right to
// edit the Workspace it created (clusterauthz's owner rule) is not enough,
// since the limits are the parent's decision, not the tenant's. Freezing
// or unfreezing a Workspace (spec.frozen, frozen.go) needs the same.
//
// A create that would go over a cap is refused with 403 and a message that
// names the cap. The count of a workspace comes from SQL (one indexed query
// of that cluster) at most every RecountEvery and is raised in between by
// the creates this process admits. Deletions do not lower it: admission
// cannot know that a deletion will happen (a dry run, a later admission
// plugin or webhook refusing it, finalizers keeping the object) and a
// count lowered for a deletion that did not happen would let creates past
// the cap. Instead a create that the count would refuse reads the count
// again first when a deletion was admitted since it was read, or when it is
// older than RecountRefused: a deletion makes room at once, and nothing but
// a stored change does. Dry runs change the count neither way. With several
// replicas, each one's count misses the others' writes of the last
// RecountEvery at most. Updates are not capped (the request size limit
// bounds each object), nor are deletions.
package workspacelimits

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// PluginName is the name under which the plugin is registered.
const PluginName = "kcp.io/WorkspaceLimits"

// RecountEvery is how old a workspace's count may get before it is read
// from SQL again.
const RecountEvery = 10 * time.Second

// RecountRefused is how old a count may be to refuse a create without
// reading it again (a create admitted and then not stored, for example a
// name that exists, raised it).
const RecountRefused = time.Second

// Counter counts a cluster's live objects and their bytes (SQL).
type Counter func(ctx context.Context, cluster logicalcluster.Name) (objects, bytes int64, err error)

// Config is what the plugin needs from the server; Configure fills it once
// the datastore and the LogicalCluster registry exist.
type Config struct {
	// Defaults apply where a workspace has no limit of its own (0: none).
	Defaults tenancy.Limits
	// Limits returns a cluster's own limits (its LogicalCluster's).
	Limits func(logicalcluster.Name) tenancy.Limits
	Count  Counter
}

// stored are the resources whose creates store nothing.
var stored = func() func(schema.GroupResource) bool {
	virtual := sets.New(
		schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"},
		schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"},
		schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
		schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"},
		schema.GroupResource{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"},
		schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"},
	)
	return func(gr schema.GroupResource) bool { return !virtual.Has(gr) }
}()

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
	authz  authorizer.Authorizer
	mu     sync.Mutex
	config *Config
	counts map[logicalcluster.Name]*count
}

type count struct {
	mu             sync.Mutex
	at             time.Time
	objects, bytes int64
	// deleted: a deletion was admitted since the count was read.
	deleted bool
}

var instance = &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), counts: map[logicalcluster.Name]*count{}}

// Register adds the plugin to a plugin registry (one instance per process).
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return instance, nil })
}

// Configure gives the plugin its configuration; until then it caps nothing
// (the server is not serving tenants yet).
func Configure(c *Config) {
	instance.mu.Lock()
	defer instance.mu.Unlock()
	instance.config = c
}

// SetAuthorizer receives the server's (cluster-aware) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// ValidateInitialization fails when no authorizer was given.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s needs an authorizer", PluginName)
	}
	return nil
}

var _ admission.ValidationInterface = &Plugin{}

// Validate refuses a change of a Workspace's limits or freeze by anyone
// the parent's RBAC does not allow to update the Workspace, and a create
// that would take its workspace over a cap.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if err := p.validateLimits(ctx, a); err != nil {
		return err
	}
	if err := p.validateFrozen(ctx, a); err != nil {
		return err
	}
	p.mu.Lock()
	cfg := p.config
	p.mu.Unlock()
	cluster, ok := logicalcluster.From(ctx)
	if cfg == nil || !ok || cluster == logicalcluster.Root || cluster == logicalcluster.SystemCRDs || cluster == logicalcluster.Wildcard ||
		!stored(a.GetResource().GroupResource()) {
		return nil
	}
	if a.GetOperation() == admission.Update {
		// The update that removes the last finalizer of an object being
		// deleted deletes it.
		if !a.IsDryRun() && finalized(a) {
			for _, n := range capped(cfg, cluster) {
				c := p.countOf(n.name)
				c.mu.Lock()
				c.deleted = true
				c.mu.Unlock()
			}
		}
		return nil
	}
	if a.GetSubresource() != "" {
		return nil
	}
	if a.GetOperation() == admission.Delete {
		// Not lowered here (see the package comment): the next create
		// that a count would refuse reads it again. A dry run deletes
		// nothing. The deletion makes room in every capped workspace
		// above too.
		if !a.IsDryRun() {
			for _, n := range capped(cfg, cluster) {
				c := p.countOf(n.name)
				c.mu.Lock()
				c.deleted = true
				c.mu.Unlock()
			}
		}
		return nil
	}
	levels := capped(cfg, cluster)
	if len(levels) == 0 {
		return nil
	}
	size := int64(0)
	for _, l := range levels {
		if l.limits.Bytes > 0 {
			raw, err := json.Marshal(a.GetObject())
			if err != nil {
				return apierrors.NewInternalError(err)
			}
			size = int64(len(raw))
			break
		}
	}
	// A new Workspace brings its own first objects (its LogicalCluster
	// and namespaces), which count in this workspace's tree too: room for
	// them is asked for now.
	objects := int64(1)
	if a.GetResource().GroupResource() == tenancy.WorkspacesResource.GroupResource() {
		objects += EmptyWorkspaceObjects
	}
	// Each capped level is locked from the workspace up (one order, so
	// concurrent creates never wait on each other in a cycle), checked,
	// and charged only once every level has room.
	for _, l := range levels {
		c := p.countOf(l.name)
		c.mu.Lock()
		defer c.mu.Unlock()
		if err := p.check(ctx, cfg, a, cluster, l, c, objects, size); err != nil {
			return err
		}
	}
	if !a.IsDryRun() {
		for _, l := range levels {
			c := p.countOf(l.name)
			c.objects += objects
			c.bytes += size
		}
	}
	return nil
}

// EmptyWorkspaceObjects is what a new workspace stores before anyone
// writes in it: its LogicalCluster and three namespaces.
const EmptyWorkspaceObjects = 4

// level is one workspace whose caps a create must fit: the workspace of
// the request or one above it (root never).
type level struct {
	name   logicalcluster.Name
	limits tenancy.Limits
	own    tenancy.Limits
}

// capped lists the workspace and every workspace above it (root excluded)
// that has a cap: a workspace's caps bound what it and every workspace
// inside it store together, so that creating child workspaces never
// stores more than the parent's cap allows.
func capped(cfg *Config, cluster logicalcluster.Name) []level {
	var out []level
	for n := cluster; n != logicalcluster.Root && n != ""; {
		own := cfg.Limits(n)
		if lim := effective(own, cfg.Defaults); lim != (tenancy.Limits{}) {
			out = append(out, level{name: n, limits: lim, own: own})
		}
		parent, ok := n.Parent()
		if !ok {
			break
		}
		n = parent
	}
	return out
}

// check refuses a create that would take one level over a cap; c is
// locked.
func (p *Plugin) check(ctx context.Context, cfg *Config, a admission.Attributes, cluster logicalcluster.Name, l level, c *count, objects, size int64) error {
	lim := l.limits
	recount := func() error {
		c.deleted = false
		n, b, err := cfg.Count(ctx, l.name)
		if err != nil {
			c.at = time.Time{}
			// The datastore is what failed: 503, as for any write now, and
			// nothing of the datastore's own message.
			klog.V(2).InfoS("workspace limits: counting failed", "cluster", l.name, "err", err)
			return apierrors.NewServiceUnavailable(fmt.Sprintf("cannot count what workspace %s stores right now; try again", l.name))
		}
		c.objects, c.bytes, c.at = n, b, time.Now()
		return nil
	}
	if c.at.IsZero() || time.Since(c.at) > RecountEvery {
		if err := recount(); err != nil {
			return err
		}
	}
	over := func() bool {
		return (lim.Objects > 0 && c.objects+objects > lim.Objects) || (lim.Bytes > 0 && c.bytes+size > lim.Bytes)
	}
	if over() && (c.deleted || time.Since(c.at) > RecountRefused) {
		if err := recount(); err != nil {
			return err
		}
	}
	what := fmt.Sprintf("workspace %s (with the workspaces inside it) stores", l.name)
	if l.name != cluster {
		what = fmt.Sprintf("workspace %s, which %s is inside, stores with the workspaces inside it", l.name, cluster)
	}
	if lim.Objects > 0 && c.objects+objects > lim.Objects {
		extra := ""
		if objects > 1 {
			extra = fmt.Sprintf(", a new workspace needs %d", objects)
		}
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(),
			fmt.Errorf("%s %d objects%s, its limit (%s) is %d: delete something first, or ask whoever manages the workspace to raise it", what, c.objects, extra, source(l.own.Objects, "objects"), lim.Objects))
	}
	if lim.Bytes > 0 && c.bytes+size > lim.Bytes {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(),
			fmt.Errorf("%s %d bytes, this object would add %d, its limit (%s) is %d: delete something first, or ask whoever manages the workspace to raise it", what, c.bytes, size, source(l.own.Bytes, "bytes"), lim.Bytes))
	}
	return nil
}

// finalized: an update that removes the last finalizer of an object that
// is being deleted.
func finalized(a admission.Attributes) bool {
	if a.GetOldObject() == nil || a.GetObject() == nil {
		return false
	}
	old, err := meta.Accessor(a.GetOldObject())
	if err != nil || old.GetDeletionTimestamp() == nil || len(old.GetFinalizers()) == 0 {
		return false
	}
	obj, err := meta.Accessor(a.GetObject())
	return err == nil && len(obj.GetFinalizers()) == 0
}

func (p *Plugin) countOf(cluster logicalcluster.Name) *count {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.counts[cluster]
	if !ok {
		c = &count{}
		p.counts[cluster] = c
	}
	return c
}

// effective: the workspace's own limit where set, the default elsewhere.
func effective(own, defaults tenancy.Limits) tenancy.Limits {
	if own.Objects == 0 {
		own.Objects = defaults.Objects
	}
	if own.Bytes == 0 {
		own.Bytes = defaults.Bytes
	}
	return own
}

func source(own int64, field string) string {
	if own > 0 {
		return "spec.limits." + field + " of its Workspace"
	}
	return "the server's --workspace-max-" + field
}
