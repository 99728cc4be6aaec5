package clusterapf

import (
	"context"
	"fmt"
	"sync"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	flowcontrolbootstrap "k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/informers"
	flowcontrolclient "k8s.io/client-go/kubernetes/typed/flowcontrol/v1"
	"k8s.io/klog/v2"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	"k8s.io/kubernetes/pkg/registry/flowcontrol/ensurer"
	flowcontrolrest "k8s.io/kubernetes/pkg/registry/flowcontrol/rest"

	"github.com/kcpsql/kcp/server/clusterinformer"
)

// WrapProviders gives the flow-control provider in providers kcp's hook
// for upstream's priority-and-fairness-config-producer (same name, so the
// same /readyz check): the same suggested and mandatory configuration,
// ensured by upstream's ensurer one object at a time, but the objects of
// each kind at once, after a wait for the informers that looks every 5 ms.
// Upstream's hook waits for them in steps of 100 ms and then ensures about
// 25 objects one after another: on a new database that was one of the last
// checks a cold start waited for.
func WrapProviders(providers []controlplaneapiserver.RESTStorageProvider) []controlplaneapiserver.RESTStorageProvider {
	out := make([]controlplaneapiserver.RESTStorageProvider, len(providers))
	for i, p := range providers {
		if fc, ok := p.(flowcontrolrest.RESTStorageProvider); ok && fc.InformerFactory != nil {
			p = producer{RESTStorageProvider: fc, factory: fc.InformerFactory}
		}
		out[i] = p
	}
	return out
}

type producer struct {
	flowcontrolrest.RESTStorageProvider
	factory informers.SharedInformerFactory
}

// PostStartHook replaces the embedded provider's hook.
func (p producer) PostStartHook() (string, genericapiserver.PostStartHookFunc, error) {
	// The informers are asked for now, before the factory starts.
	plc := p.factory.Flowcontrol().V1().PriorityLevelConfigurations()
	fs := p.factory.Flowcontrol().V1().FlowSchemas()
	plc.Informer()
	fs.Informer()
	return flowcontrolrest.PostStartHookName, func(hc genericapiserver.PostStartHookContext) error {
		client, err := flowcontrolclient.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return fmt.Errorf("priority and fairness configuration: %w", err)
		}
		plcOps := ensurer.NewPriorityLevelConfigurationOps(client.PriorityLevelConfigurations(), plc.Lister())
		fsOps := ensurer.NewFlowSchemaOps(client.FlowSchemas(), fs.Lister())
		ctx, cancel := context.WithTimeout(hc.Context, 5*time.Minute)
		defer cancel()
		if !clusterinformer.WaitForSync(ctx, plc.Informer().HasSynced, fs.Informer().HasSynced) {
			return fmt.Errorf("priority and fairness configuration: the informers did not sync")
		}
		var last error
		err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			if last = ensureAll(ctx, plcOps, fsOps); last != nil {
				klog.InfoS("priority and fairness configuration not in place yet; retrying", "err", last)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			if last != nil {
				err = last
			}
			return fmt.Errorf("priority and fairness configuration: %w", err)
		}
		klog.InfoS("priority and fairness configuration in place")
		// As upstream: put back what was changed or removed, every minute.
		go func() {
			tick := time.NewTicker(time.Minute)
			defer tick.Stop()
			for {
				select {
				case <-hc.Context.Done():
					return
				case <-tick.C:
					if err := ensureAll(hc.Context, plcOps, fsOps); err != nil {
						klog.ErrorS(err, "priority and fairness configuration: will try again")
					}
				}
			}
		}()
		return nil
	}, nil
}

// ensureAll ensures the priority levels, then the flow schemas (which name
// them), each kind's objects at once, then removes bootstrap objects that
// are no longer part of the configuration, as upstream's ensurer does.
func ensureAll(ctx context.Context, plcOps ensurer.ObjectOps[*flowcontrolv1.PriorityLevelConfiguration], fsOps ensurer.ObjectOps[*flowcontrolv1.FlowSchema]) error {
	if err := ensureEach(ctx, plcOps, flowcontrolbootstrap.SuggestedPriorityLevelConfigurations, flowcontrolbootstrap.MandatoryPriorityLevelConfigurations); err != nil {
		return err
	}
	if err := ensureEach(ctx, fsOps, flowcontrolbootstrap.SuggestedFlowSchemas, flowcontrolbootstrap.MandatoryFlowSchemas); err != nil {
		return err
	}
	if err := ensurer.RemoveUnwantedObjects(ctx, fsOps, append(append([]*flowcontrolv1.FlowSchema{}, flowcontrolbootstrap.MandatoryFlowSchemas...), flowcontrolbootstrap.SuggestedFlowSchemas...)); err != nil {
		return err
	}
	return ensurer.RemoveUnwantedObjects(ctx, plcOps, append(append([]*flowcontrolv1.PriorityLevelConfiguration{}, flowcontrolbootstrap.MandatoryPriorityLevelConfigurations...), flowcontrolbootstrap.SuggestedPriorityLevelConfigurations...))
}

// ensureEach ensures every object of suggested (which an operator may
// change: left alone when annotated so) and of mandatory (always put
// back) at once; the first error is returned when all are done.
func ensureEach[T interface {
	comparable
	metav1.Object
	runtime.Object
}](ctx context.Context, ops ensurer.ObjectOps[T], suggested, mandatory []T) error {
	var wg sync.WaitGroup
	errs := make([]error, len(suggested)+len(mandatory))
	run := func(i int, obj T, strategy ensurer.EnsureStrategy[T]) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ensurer.EnsureConfiguration(ctx, ops, obj, strategy)
		}()
	}
	for i, obj := range suggested {
		run(i, obj, ensurer.NewSuggestedEnsureStrategy[T]())
	}
	for i, obj := range mandatory {
		run(len(suggested)+i, obj, ensurer.NewMandatoryEnsureStrategy[T]())
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
