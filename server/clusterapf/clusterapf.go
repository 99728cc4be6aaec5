// Package clusterapf makes API priority and fairness share the server
// between logical clusters.
//
// Upstream's APF classifies a request by its user and puts it in a flow of
// its FlowSchema's priority level; flows of one level share the level's
// seats fairly. Unchanged, users of equal names in different clusters share
// a flow, a tenant with many users gets many flows, and a tenant's service
// account in kube-system matches root's schemas for the real kube-system.
// Here, root's configuration (the operator's) sees every request of a
// tenant (a logical cluster other than root, by a user not in
// system:masters) as one user, "kcp:tenant:<cluster>", in group
// "kcp:tenants": root's FlowSchema kcp-tenants (created if missing, then
// the operator's to change) puts all of them in priority level kcp-tenants
// with one flow per tenant. A tenant flooding the server queues behind its
// own requests.
//
// Sharing seats is not sharing CPU: a tenant's unpaged list of thousands of
// objects holds at most ten seats but a whole CPU while it encodes them, so
// a few tenants' floods of such lists would take every CPU from the other
// tenants' small requests. A tenant's list whose last answer (in the same
// cluster, resource and namespace) was wider than ObjectsPerSeat objects
// therefore carries the extra group "kcp:tenants:wide-lists" as well, and
// root's FlowSchema kcp-tenant-lists puts it in a level of its own with a
// few seats per two CPUs, no borrowing and a flow per tenant: wide lists of
// all tenants together take a bounded part of the CPU, and a tenant's flood
// of them waits behind itself.
//
// Within its flow, a tenant that has FlowSchemas or
// PriorityLevelConfigurations of its own is classified by them first:
// upstream's controller runs for that tenant over its own objects, with
// TenantConcurrency seats to share among its levels, and its response
// headers name the tenant's FlowSchema and priority level. A tenant without
// any costs nothing.
package clusterapf

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcpsql/kcp/server/clusterinformer"
	"github.com/kcpsql/kcp/server/percluster"
	"github.com/kcpsql/kcp/server/tenantslots"
	"github.com/kcpsql/kcp/server/viewidentity"
	"github.com/kcpsql/kcp/storage/clusterstore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

const (
	// TenantsGroup is the group of the user root's configuration sees for
	// every tenant request.
	TenantsGroup = "kcp:tenants"
	// TenantUserPrefix begins that user's name; the cluster follows.
	TenantUserPrefix = "kcp:tenant:"
	// TenantsName names root's FlowSchema and priority level for tenants.
	TenantsName = "kcp-tenants"
	// TenantListsGroup is added to that user's groups for a wide list.
	TenantListsGroup = "kcp:tenants:wide-lists"
	// TenantListsName names root's FlowSchema and priority level for
	// tenants' wide lists.
	TenantListsName = "kcp-tenant-lists"
	// TenantConcurrency is the seats a tenant's own priority levels share
	// (their nominalConcurrencyShares divide it), inside its flow of root's
	// kcp-tenants level.
	TenantConcurrency = 50
)

// ConfigResources are the objects whose presence in a tenant runs an APF
// controller for it.
var ConfigResources = []schema.GroupVersionResource{
	flowcontrolv1.SchemeGroupVersion.WithResource("flowschemas"),
	flowcontrolv1.SchemeGroupVersion.WithResource("prioritylevelconfigurations"),
}

// FlowControl is root's APF controller with tenants' requests classified
// as above.
type FlowControl struct {
	utilflowcontrol.Interface
	tenants *percluster.Registry[utilflowcontrol.Interface]
	clients *clusterinformer.Clients // set by Start before tenants starts
	slots   *tenantslots.Slots       // nil: no bound
	// watchStarts bound the watches of one tenant that are starting at
	// once (nil: no bound); see inSlot.
	watchStarts *tenantslots.Slots
}

// Wrap wraps root's controller; Start must run before tenants' own
// configuration applies. A tenant executes at most tenantInflight requests
// at once (watches apart), the others wait for one of them to end; 0 sets
// no bound.
//
// At most tenantWatchStarts watches of a tenant start at once (0: no
// bound): see inSlot.
func Wrap(root utilflowcontrol.Interface, tenantInflight, tenantWatchStarts int) *FlowControl {
	f := &FlowControl{Interface: root}
	if tenantInflight > 0 {
		f.slots = tenantslots.New(tenantInflight)
	}
	if tenantWatchStarts > 0 {
		f.watchStarts = tenantslots.New(tenantWatchStarts)
	}
	f.tenants = percluster.New("API priority and fairness of a tenant", ConfigResources, f.build)
	return f
}

// Start creates root's kcp-tenants FlowSchema and priority level if they
// are missing and watches tenants' own APF objects.
func (f *FlowControl) Start(ctx context.Context, loopback *rest.Config) error {
	clients, err := clusterinformer.NewClients(loopback)
	if err != nil {
		return err
	}
	f.clients = clients
	if err := ensureRootConfig(ctx, clients); err != nil {
		return err
	}
	return f.tenants.Start(ctx, loopback)
}

func (f *FlowControl) build(ctx context.Context, cluster logicalcluster.Name) (utilflowcontrol.Interface, error) {
	client, err := f.clients.Kubernetes(cluster)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl := utilflowcontrol.New(factory, client.FlowcontrolV1(), TenantConcurrency)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go func() {
		if err := ctrl.Run(ctx.Done()); err != nil {
			klog.ErrorS(err, "API priority and fairness of a tenant", "cluster", cluster)
		}
	}()
	return ctrl, nil
}

// Handle classifies and queues a request as the package comment says.
func (f *FlowControl) Handle(ctx context.Context, rd utilflowcontrol.RequestDigest,
	noteFn func(fs *flowcontrolv1.FlowSchema, pl *flowcontrolv1.PriorityLevelConfiguration, flowDistinguisher string),
	workEstimator func() fcrequest.WorkEstimate, queueNoteFn fq.QueueNoteFn, execFn func()) {
	reached, ok := logicalcluster.From(ctx)
	cluster := reached
	// A request through a view (an export's, a syncer's) is the view
	// workspace's, whatever it reaches and whichever identity it
	// continues as: a tenant cannot leave its flow by going through its
	// own view.
	view, slots, viaView := viewidentity.TenantFrom(ctx)
	if viaView {
		cluster, ok = view, true
	} else {
		slots = cluster
	}
	if !ok || cluster == logicalcluster.Root || (!viaView && (cluster.IsWildcard() || rd.User == nil || slices.Contains(rd.User.GetGroups(), user.SystemPrivilegedGroup))) {
		f.Interface.Handle(ctx, rd, noteFn, workEstimator, queueNoteFn, execFn)
		return
	}
	n, seen := lastListSize(reached, rd)
	workEstimator = tenantListCost(n, seen, workEstimator)
	groups := []string{TenantsGroup, user.AllAuthenticated}
	if seen && n > ObjectsPerSeat { // a wide list (see below)
		groups = append(groups, TenantListsGroup)
	}
	tenant := utilflowcontrol.RequestDigest{RequestInfo: rd.RequestInfo,
		User: &user.DefaultInfo{Name: TenantUserPrefix + string(cluster), Groups: groups}}
	own, ok, err := f.tenants.Get(ctx, cluster)
	if err != nil || !ok {
		if err != nil {
			klog.V(2).InfoS("API priority and fairness of a tenant: using root's classification alone", "cluster", cluster, "err", err)
		}
		f.inSlot(ctx, slots, rd, func() { f.Interface.Handle(ctx, tenant, noteFn, workEstimator, queueNoteFn, execFn) })
		return
	}
	// The tenant's own classification first (within its share), then the
	// tenant's flow of root's level. Response headers name the tenant's
	// objects, not root's, unless none of the tenant's matched (upstream
	// then uses the mandatory catch-all it imagines, which has no UID).
	var ownMatched bool
	own.Handle(ctx, rd, func(fs *flowcontrolv1.FlowSchema, pl *flowcontrolv1.PriorityLevelConfiguration, d string) {
		ownMatched = fs.UID != ""
		noteFn(fs, pl, d)
	}, workEstimator, queueNoteFn, func() {
		rootNote := noteFn
		if ownMatched {
			rootNote = func(*flowcontrolv1.FlowSchema, *flowcontrolv1.PriorityLevelConfiguration, string) {}
		}
		f.inSlot(ctx, slots, rd, func() { f.Interface.Handle(ctx, tenant, rootNote, workEstimator, queueNoteFn, execFn) })
	})
}

// inSlot runs handle, root's classification and queuing of a tenant's
// request, once the request holds one of the tenant's execution slots
// (tenantslots; watches need none). A tenant with priority levels of its
// own has ordered its requests by them already. A request whose context
// ends while it waits is not run (it is answered 429).
//
// A watch holds its seats until it has sent its initial objects (upstream
// signals initialization then), which for a watch from no resourceVersion
// of thousands of objects takes a while: a tenant starting hundreds of them
// at once held nearly every seat of the kcp-tenants level, and the other
// tenants' small requests queued behind them for tens of seconds. So a
// tenant's watch waits, before it is queued for seats, until fewer than
// watchStarts of the tenant's watches are starting; handle returns when
// the watch is initialized (or ends), and the next may start. A tenant's
// watches then hold at most watchStarts times a watch's seats, and its
// other requests, and every other tenant's, go on.
func (f *FlowControl) inSlot(ctx context.Context, cluster logicalcluster.Name, rd utilflowcontrol.RequestDigest, handle func()) {
	if rd.RequestInfo != nil && rd.RequestInfo.Verb == "watch" {
		if f.watchStarts == nil {
			handle()
			return
		}
		f.watchStarts.RunUnheld(ctx, cluster, handle)
		return
	}
	if f.slots == nil {
		handle()
		return
	}
	f.slots.Run(ctx, cluster, handle)
}

// ObjectsPerSeat and MaxListSeats are upstream's defaults for the cost
// of a list: a seat per 100 objects, at most 10.
const (
	ObjectsPerSeat = 100
	MaxListSeats   = 10
)

// lastListSize is the size of the last list like rd (a list of the same
// resource in the same cluster and namespace; clusterstore.ListSizes), if
// rd is a list and one was seen.
func lastListSize(cluster logicalcluster.Name, rd utilflowcontrol.RequestDigest) (int, bool) {
	ri := rd.RequestInfo
	if ri == nil || !ri.IsResourceRequest || ri.Name != "" || ri.Verb != "list" {
		return 0, false
	}
	return clusterstore.ListSizes.Last(cluster, schema.GroupResource{Group: ri.APIGroup, Resource: ri.Resource}, ri.Namespace)
}

// tenantListCost estimates a tenant's list from the size of the last such
// list (lastListSize) rather than from the number of objects of the
// resource in all clusters; until one was seen, upstream's estimate stands.
func tenantListCost(n int, seen bool, upstream func() fcrequest.WorkEstimate) func() fcrequest.WorkEstimate {
	if !seen {
		return upstream
	}
	return func() fcrequest.WorkEstimate {
		w := upstream()
		seats := uint64((n + ObjectsPerSeat - 1) / ObjectsPerSeat)
		w.InitialSeats = min(max(seats, 1), MaxListSeats)
		return w
	}
}

// RootConfig is what ensureRootConfig creates in root when missing: the
// kcp-tenants level and schema, then the kcp-tenant-lists ones.
func RootConfig() ([]*flowcontrolv1.PriorityLevelConfiguration, []*flowcontrolv1.FlowSchema) {
	pl, fs := tenantsConfig()
	wpl, wfs := wideListsConfig()
	return []*flowcontrolv1.PriorityLevelConfiguration{pl, wpl}, []*flowcontrolv1.FlowSchema{fs, wfs}
}

// tenantsConfig is root's level for tenants' requests: one flow per
// tenant, shuffle-sharded over a few of many queues.
func tenantsConfig() (*flowcontrolv1.PriorityLevelConfiguration, *flowcontrolv1.FlowSchema) {
	pl := limitedLevel(TenantsName, flowcontrolv1.LimitedPriorityLevelConfiguration{
		NominalConcurrencyShares: ptr.To[int32](30),
		LendablePercent:          ptr.To[int32](50),
	}, flowcontrolv1.QueuingConfiguration{Queues: 256, HandSize: 6, QueueLengthLimit: 50})
	// Before global-default (9900) and service-accounts (9000); nothing else
	// of the defaults matches the tenants' user.
	fs := perUserSchema(TenantsName, 8000, TenantsGroup, flowcontrolv1.PolicyRulesWithSubjects{
		ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
			ClusterScope: true, Namespaces: []string{flowcontrolv1.NamespaceEvery}}},
		NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
	})
	return pl, fs
}

// WideListSeats is the least number of seats root's kcp-tenant-lists
// level is created with for each two CPUs the server may use: one list of
// MaxListSeats*ObjectsPerSeat objects at a time per two CPUs (rounding up
// the shares gives 13 on two CPUs).
const WideListSeats = MaxListSeats + 1

// wideListsConfig is root's level for tenants' wide lists (see the
// comment "A wide list" below): few seats, neither lending nor borrowing (its seats bound the
// CPU that tenants' wide lists take from everything else), one flow per
// tenant in one queue of its own rather than six, so that another tenant's
// list waits for at most one of a flooding tenant's.
func wideListsConfig() (*flowcontrolv1.PriorityLevelConfiguration, *flowcontrolv1.FlowSchema) {
	pl := limitedLevel(TenantListsName, flowcontrolv1.LimitedPriorityLevelConfiguration{
		NominalConcurrencyShares: ptr.To(wideListShares(runtime.GOMAXPROCS(0))),
		LendablePercent:          ptr.To[int32](0),
		BorrowingLimitPercent:    ptr.To[int32](0),
	}, flowcontrolv1.QueuingConfiguration{Queues: 256, HandSize: 1, QueueLengthLimit: 100})
	fs := perUserSchema(TenantListsName, 7900, TenantListsGroup, flowcontrolv1.PolicyRulesWithSubjects{ // before kcp-tenants
		ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"list"}, APIGroups: []string{"*"}, Resources: []string{"*"},
			ClusterScope: true, Namespaces: []string{flowcontrolv1.NamespaceEvery}}},
	})
	return pl, fs
}

// limitedLevel is a Limited priority level that queues.
func limitedLevel(name string, limited flowcontrolv1.LimitedPriorityLevelConfiguration, queuing flowcontrolv1.QueuingConfiguration) *flowcontrolv1.PriorityLevelConfiguration {
	limited.LimitResponse = flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &queuing}
	return &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &limited},
	}
}

// perUserSchema is a FlowSchema name for the level name, matching the rules
// for members of group, with a flow per user (per tenant, see Handle).
func perUserSchema(name string, precedence int32, group string, rules flowcontrolv1.PolicyRulesWithSubjects) *flowcontrolv1.FlowSchema {
	rules.Subjects = []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: group}}}
	return &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: name},
			MatchingPrecedence:         precedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{rules},
		},
	}
}

// wideListShares is the nominal concurrency shares that give the
// kcp-tenant-lists level about WideListSeats seats per two CPUs next to
// upstream's default levels and kcp-tenants (whose shares sum to 275 of
// the server's 600 seats).
func wideListShares(cpus int) int32 {
	seats := WideListSeats * max(1, cpus/2)
	return int32(max(1, (seats*275+600-seats-1)/(600-seats)))
}

// A wide list is a tenant's list whose last such answer held more than
// ObjectsPerSeat objects. Such lists are CPU-bound (encoding their
// objects): they go to root's kcp-tenant-lists level, whose few seats bound
// the CPU all tenants' wide lists take together, so that a tenant flooding
// the server with them slows its own lists, not other tenants' small
// requests.

// ensureRootConfig creates root's kcp-tenants objects if they do not
// exist; an operator's changes to them are kept.
func ensureRootConfig(ctx context.Context, clients *clusterinformer.Clients) error {
	c, err := clients.Kubernetes(logicalcluster.Root)
	if err != nil {
		return err
	}
	pls, fss := RootConfig()
	// Other post-start hooks (admission among them) start alongside this
	// one: retry transient refusals for a minute before giving up.
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, pl := range pls {
			if _, err := c.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, pl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				last = fmt.Errorf("priority level %s: %w", pl.Name, err)
				return false, nil
			}
		}
		for _, fs := range fss {
			if _, err := c.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				last = fmt.Errorf("FlowSchema %s: %w", fs.Name, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("creating root's API priority and fairness objects for tenants: %w", last)
	}
	return err
}
