package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// previousContext remembers where `ws use -` goes back to.
const previousContext = "kcp-previous-workspace"

type wsOptions struct {
	// kubectl's own connection flags (--kubeconfig, --context, --server,
	// --token, --as, ...): kubectl passes a plugin every flag given after the
	// plugin's name, and users expect the ones they give kubectl to work.
	flags   *genericclioptions.ConfigFlags
	timeout time.Duration
}

// addKubectlFlags gives cmd kubectl's connection flags.
func (o *wsOptions) addKubectlFlags(cmd *cobra.Command) {
	o.flags = genericclioptions.NewConfigFlags(false)
	o.flags.AddFlags(cmd.PersistentFlags())
}

func newWorkspaceCommand() *cobra.Command {
	o := &wsOptions{}
	cmd := &cobra.Command{
		Use:     "ws",
		Aliases: []string{"workspace", "workspaces"},
		Short:   "Create, enter, list, freeze and delete workspaces",
		Long: `Workspaces are logical clusters arranged in a tree (root, root:acme,
root:acme:web). The current workspace is the path in the server URL of the
kubeconfig's current cluster (https://host:6443/clusters/root:acme);
'ws use' edits that URL.`,
		Example: `  kubectl kcp ws current
  kubectl kcp ws create team-a --enter
  kubectl kcp ws use root:acme:web     # absolute
  kubectl kcp ws use web               # a child of the current workspace
  kubectl kcp ws use ..                # the parent
  kubectl kcp ws use -                 # back to the previous one
  kubectl kcp ws tree
  kubectl kcp ws delete team-a
  kubectl kcp ws freeze team-a --reason "incident 4711"
  kubectl kcp ws unfreeze team-a`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.current(cmd.OutOrStdout()) },
	}
	o.addKubectlFlags(cmd)
	cmd.PersistentFlags().DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for a workspace to become ready")

	var wsType string
	var enter bool
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a workspace in the current one and wait until it is ready",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.create(cmd.OutOrStdout(), args[0], wsType, enter)
		},
	}
	create.Flags().StringVar(&wsType, "type", "", "WorkspaceType of the workspace, defined in the current workspace or an ancestor (kubectl get workspacetypes; built in: organization, team); the type's default APIs are bound before the workspace is ready")
	create.Flags().BoolVar(&enter, "enter", false, "enter the workspace once it is ready")
	wait := true
	deleteCmd := &cobra.Command{Use: "delete NAME", Short: "Delete a workspace of the current one, with everything it holds, and wait until it is gone", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.delete(cmd.OutOrStdout(), args[0], wait) }}
	deleteCmd.Flags().BoolVar(&wait, "wait", true, "wait until the workspace and its data are gone (up to --timeout)")
	cmd.AddCommand(create,
		&cobra.Command{Use: "use PATH|NAME|..|-", Short: "Enter a workspace", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return o.use(cmd.OutOrStdout(), args[0]) }},
		&cobra.Command{Use: "current", Short: "Print the current workspace", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return o.current(cmd.OutOrStdout()) }},
		&cobra.Command{Use: "tree", Short: "Print the workspaces below the current one", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return o.tree(cmd.OutOrStdout()) }},
		deleteCmd,
	)
	cmd.AddCommand(newFreezeCommands(o)...)
	return cmd
}

// state is the loaded kubeconfig with the current server split into its
// base URL and workspace path.
type state struct {
	access  clientcmd.ConfigAccess // where use writes the kubeconfig
	client  *rest.Config           // with every flag applied, read once
	raw     clientcmdapi.Config
	context string
	cluster string
	base    string
	current logicalcluster.Name
}

func (o *wsOptions) load() (*state, error) {
	loader := o.flags.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, err
	}
	// The configuration with every flag applied (--server, --context, ...).
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, err
	}
	ctxName := raw.CurrentContext
	if o.flags.Context != nil && *o.flags.Context != "" {
		ctxName = *o.flags.Context
	}
	clusterName := ""
	if kctx, ok := raw.Contexts[ctxName]; ok {
		clusterName = kctx.Cluster
	}
	if o.flags.ClusterName != nil && *o.flags.ClusterName != "" {
		clusterName = *o.flags.ClusterName
	}
	base, current, err := splitServer(cfg.Host)
	if err != nil {
		return nil, err
	}
	return &state{access: loader.ConfigAccess(), client: cfg, raw: raw, context: ctxName, cluster: clusterName, base: base, current: current}, nil
}

// loadCurrent loads the kubeconfig and returns the client configuration
// and a dynamic client of the current workspace.
func (o *wsOptions) loadCurrent() (*state, *rest.Config, dynamic.Interface, error) {
	s, err := o.load()
	if err != nil {
		return nil, nil, nil, err
	}
	cfg := s.config(s.current)
	dyn, err := dynamic.NewForConfig(cfg)
	return s, cfg, dyn, err
}

// splitServer turns https://h:6443/clusters/root:a into (https://h:6443, root:a).
func splitServer(server string) (string, logicalcluster.Name, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", "", fmt.Errorf("server URL %q: %v", server, err)
	}
	path := strings.TrimSuffix(u.Path, "/")
	i := strings.Index(path, "/clusters/")
	if i < 0 {
		return strings.TrimSuffix(server, "/"), logicalcluster.Root, nil
	}
	name, err := logicalcluster.Parse(path[i+len("/clusters/"):])
	if err != nil || name.IsWildcard() {
		return "", "", fmt.Errorf("server URL %q does not name a workspace: %v", server, err)
	}
	u.Path = path[:i]
	return strings.TrimSuffix(u.String(), "/"), name, nil
}

func (s *state) config(cluster logicalcluster.Name) *rest.Config {
	cfg := rest.CopyConfig(s.client)
	cfg.Host = s.base + "/clusters/" + string(cluster)
	return cfg
}

func (s *state) workspaces(cluster logicalcluster.Name) (dynamic.ResourceInterface, error) {
	d, err := dynamic.NewForConfig(s.config(cluster))
	if err != nil {
		return nil, err
	}
	return d.Resource(tenancy.WorkspacesResource), nil
}

// resolve turns a use argument into an absolute path.
func (s *state) resolve(arg string) (logicalcluster.Name, error) {
	switch {
	case arg == "..":
		p, ok := s.current.Parent()
		if !ok {
			return "", fmt.Errorf("root has no parent")
		}
		return p, nil
	case arg == "-":
		prev, ok := s.raw.Clusters[previousContext]
		if !ok {
			return "", fmt.Errorf("there is no previous workspace")
		}
		_, p, err := splitServer(prev.Server)
		return p, err
	case arg == "~" || arg == ":" || arg == string(logicalcluster.Root):
		return logicalcluster.Root, nil
	case strings.HasPrefix(arg, string(logicalcluster.Root)+":"):
		return logicalcluster.Parse(arg)
	default:
		if err := logicalcluster.ValidateLabel(arg); err != nil {
			return "", fmt.Errorf("%q is neither an absolute path (root:...) nor a workspace name: %v", arg, err)
		}
		return logicalcluster.Parse(string(s.current.Join(arg)))
	}
}

// enter checks that the workspace answers and points the kubeconfig at it.
func (o *wsOptions) enter(out io.Writer, s *state, target logicalcluster.Name) error {
	client, err := kubernetes.NewForConfig(s.config(target))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Discovery().RESTClient().Get().AbsPath("/api").DoRaw(ctx); err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("workspace %q does not exist or you may not access it", target)
		}
		return fmt.Errorf("workspace %q: %v", target, err)
	}
	if s.raw.Clusters[s.cluster] == nil {
		return fmt.Errorf("workspace %q exists, but there is no kubeconfig cluster to point at it (context %q names none): entering a workspace edits the server URL of the current context's cluster", target, s.context)
	}
	cl := s.raw.Clusters[s.cluster].DeepCopy()
	prev := cl.DeepCopy()
	cl.Server = s.base + "/clusters/" + string(target)
	s.raw.Clusters[s.cluster] = cl
	s.raw.Clusters[previousContext] = prev
	if err := clientcmd.ModifyConfig(s.access, s.raw, true); err != nil {
		return err
	}
	fmt.Fprintf(out, "Current workspace is %q.\n", target)
	return nil
}

func (o *wsOptions) current(out io.Writer) error {
	s, err := o.load()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Current workspace is %q.\n", s.current)
	return nil
}

func (o *wsOptions) use(out io.Writer, arg string) error {
	s, err := o.load()
	if err != nil {
		return err
	}
	target, err := s.resolve(arg)
	if err != nil {
		return err
	}
	return o.enter(out, s, target)
}

func (o *wsOptions) create(out io.Writer, name, wsType string, enter bool) error {
	if err := logicalcluster.ValidateLabel(name); err != nil {
		return fmt.Errorf("invalid workspace name %q: %v", name, err)
	}
	s, _, dyn, err := o.loadCurrent()
	if err != nil {
		return err
	}
	target, err := logicalcluster.Parse(string(s.current.Join(name)))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Creating workspace %q and waiting for it to be ready ...\n", target)
	if err := tenancy.CreateWorkspace(context.Background(), dyn, name, wsType, false, o.timeout); err != nil {
		return fmt.Errorf("creating workspace %q: %v", target, err)
	}
	fmt.Fprintf(out, "Workspace %q is ready.\n", target)
	if enter {
		return o.enter(out, s, target)
	}
	return nil
}

func (o *wsOptions) delete(out io.Writer, name string, wait bool) error {
	s, err := o.load()
	if err != nil {
		return err
	}
	ws, err := s.workspaces(s.current)
	if err != nil {
		return err
	}
	target := s.current.Join(name)
	if err := ws.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting workspace %q: %v", target, err)
	}
	if !wait {
		fmt.Fprintf(out, "Workspace %q is being deleted with everything it holds.\n", target)
		return nil
	}
	fmt.Fprintf(out, "Deleting workspace %q with everything it holds ...\n", target)
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	for {
		_, err := ws.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(out, "Workspace %q is deleted.\n", target)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workspace %q is still being deleted after %s (deletion goes on; check with kubectl get workspace %s)", target, o.timeout, name)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (o *wsOptions) tree(out io.Writer) error {
	s, err := o.load()
	if err != nil {
		return err
	}
	fmt.Fprintln(out, s.current)
	return o.printChildren(out, s, s.current, "")
}

func (o *wsOptions) printChildren(out io.Writer, s *state, parent logicalcluster.Name, indent string) error {
	ws, err := s.workspaces(parent)
	if err != nil {
		return err
	}
	list, err := ws.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			fmt.Fprintf(out, "%s└── (no permission to list workspaces)\n", indent)
			return nil
		}
		return err
	}
	names := make([]string, 0, len(list.Items))
	for _, i := range list.Items {
		names = append(names, i.GetName())
	}
	sort.Strings(names)
	for i, n := range names {
		branch, next := "├── ", "│   "
		if i == len(names)-1 {
			branch, next = "└── ", "    "
		}
		fmt.Fprintf(out, "%s%s%s\n", indent, branch, n)
		if err := o.printChildren(out, s, parent.Join(n), indent+next); err != nil {
			return err
		}
	}
	return nil
}
