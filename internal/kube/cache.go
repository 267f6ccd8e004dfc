package kube

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Cache holds the objects of one resource in every namespace as a watch delivers them (a
// client-go informer), so that a function that handles one event after another finds them in
// memory instead of asking the apiserver each time. Its copies are those of the apiserver's
// watch cache, which a read with resourceVersion 0 returns too, a moment later: they may be a
// little behind the latest write, or not know an object created a moment ago. They hold
// neither managed fields nor kubectl's last-applied-configuration annotation, so they are
// written back with patches, never with an update of the whole object. Until its first
// listing has arrived a Cache answers nothing, and callers ask the apiserver as they would
// without it.
type Cache[T Object] struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}
	once     sync.Once
}

// lastApplied is the annotation in which kubectl apply keeps the manifest it last applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// NewCache returns a Cache of o's objects, indexed by each of indexers (an index name and the
// value an object is found under), that Start fills.
func NewCache[T Object, L runtime.Object](o *Objects[T, L], indexers map[string]func(T) string) *Cache[T] {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return o.List(ctx, "", opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return o.Watch(ctx, "", opts)
		},
	}
	idx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	for name, fn := range indexers {
		idx[name] = func(obj any) ([]string, error) {
			t, ok := obj.(T)
			if !ok {
				return nil, fmt.Errorf("a cache of %s holds a %T", o.resource, obj)
			}
			return []string{fn(t)}, nil
		}
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, o.newObj(), cache.SharedIndexInformerOptions{
		Indexers: idx, ObjectDescription: o.resource,
	})
	// The managed fields, and kubectl's copy of the last applied manifest, are most of a small
	// object's bytes and nothing reflector reads.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
			if a := m.GetAnnotations(); a[lastApplied] != "" {
				delete(a, lastApplied)
			}
		}
		return obj, nil
	})
	return &Cache[T]{informer: inf, done: make(chan struct{})}
}

// Start lists and watches in the background until Stop or until ctx ends. A Cache starts once.
func (c *Cache[T]) Start(ctx context.Context) {
	c.once.Do(func() {
		ctx, c.cancel = context.WithCancel(ctx)
		go func() {
			defer close(c.done)
			c.informer.RunWithContext(ctx)
		}()
	})
}

// Stop ends the watch and waits for it to end. A Cache that was never started, or nil, stops
// at once.
func (c *Cache[T]) Stop() {
	if c == nil {
		return
	}
	c.once.Do(func() { close(c.done) })
	if c.cancel != nil {
		c.cancel()
	}
	<-c.done
}

// Synced tells whether the first listing has arrived, after which the Cache answers.
func (c *Cache[T]) Synced() bool {
	return c != nil && c.informer.HasSynced()
}

// Get returns a copy of the object namespace/name, which the caller may change; ok is false
// when the Cache is not synced yet or does not hold the object.
func (c *Cache[T]) Get(namespace, name string) (obj T, ok bool) {
	if !c.Synced() {
		return obj, false
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	item, exists, err := c.informer.GetStore().GetByKey(key)
	if err != nil || !exists {
		return obj, false
	}
	t, isT := item.(T)
	if !isT {
		return obj, false
	}
	return t.DeepCopyObject().(T), true
}

// Indexed returns copies of the objects found under value in the index named index, which the
// caller may change; ok is false when the Cache is not synced yet.
func (c *Cache[T]) Indexed(index, value string) (objs []T, ok bool) {
	if !c.Synced() {
		return nil, false
	}
	items, err := c.informer.GetIndexer().ByIndex(index, value)
	if err != nil {
		return nil, false
	}
	for _, item := range items {
		if t, isT := item.(T); isT {
			objs = append(objs, t.DeepCopyObject().(T))
		}
	}
	return objs, true
}

// List returns copies of every object of namespace ("" for all), which the caller may change;
// ok is false when the Cache is not synced yet.
func (c *Cache[T]) List(namespace string) (objs []T, ok bool) {
	ok = c.Range(namespace, func(t T) { objs = append(objs, t.DeepCopyObject().(T)) })
	return objs, ok
}

// Range calls each with every object of namespace ("" for all) as the Cache holds it, without
// a copy: each must neither change nor keep it. ok is false, and each is not called, when the
// Cache is not synced yet.
func (c *Cache[T]) Range(namespace string, each func(T)) (ok bool) {
	if !c.Synced() {
		return false
	}
	var items []any
	if namespace == "" {
		items = c.informer.GetStore().List()
	} else {
		var err error
		if items, err = c.informer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace); err != nil {
			return false
		}
	}
	for _, item := range items {
		if t, isT := item.(T); isT {
			each(t)
		}
	}
	return true
}
