package imagecatalog

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// ConfigMapKey is the data key that holds the catalog document.
const ConfigMapKey = "catalog.yaml"

// ConfigMapStore keeps the catalog document in a ConfigMap, under
// ConfigMapKey. Compare-and-swap is the API server's: Save sends the
// resourceVersion it loaded, and the server refuses the write (409 Conflict)
// when another writer got there first. Creating the ConfigMap is the first
// save; two first saves race on AlreadyExists, which is a conflict too.
type ConfigMapStore struct {
	Client    corev1client.ConfigMapsGetter
	Namespace string
	Name      string
}

func (s ConfigMapStore) String() string { return "configmap://" + s.Namespace + "/" + s.Name }

// rvPrefix marks a revision of an existing ConfigMap, so that "" keeps
// meaning "nothing stored" even where a resourceVersion is empty.
const rvPrefix = "rv:"

// Load reads the catalog. A missing ConfigMap, or one without the key, is
// an empty catalog; the revision's Hash is "rv:" and the resourceVersion
// ("" when the ConfigMap does not exist).
func (s ConfigMapStore) Load(ctx context.Context) (Catalog, Revision, error) {
	cm, err := s.Client.ConfigMaps(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Catalog{}, Revision{}, nil
	}
	if err != nil {
		return Catalog{}, Revision{}, fmt.Errorf("load %s: %w", s, err)
	}
	rev := Revision{Hash: rvPrefix + cm.ResourceVersion}
	data, ok := cm.Data[ConfigMapKey]
	if !ok {
		return Catalog{}, rev, nil
	}
	c, gen, err := Unmarshal(s.String()+"#"+ConfigMapKey, []byte(data))
	if err != nil {
		return Catalog{}, rev, err
	}
	rev.Generation = gen
	return c, rev, nil
}

// Save writes c if the ConfigMap is still at rev. Keys other than
// ConfigMapKey, labels and annotations are kept.
func (s ConfigMapStore) Save(ctx context.Context, c Catalog, rev Revision) (Revision, error) {
	if err := c.Validate(); err != nil {
		return rev, fmt.Errorf("save %s: %w", s, err)
	}
	data, err := Marshal(c, rev.Generation+1)
	if err != nil {
		return rev, err
	}
	cms := s.Client.ConfigMaps(s.Namespace)
	var out *corev1.ConfigMap
	if rev.Hash == "" {
		out, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "prebake"}},
			Data: map[string]string{ConfigMapKey: string(data)},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return rev, fmt.Errorf("save %s: %w: another writer created it since it was loaded; load it again and retry", s, ErrConflict)
		}
	} else {
		// Get the object to keep what is not ours, but write it with the
		// resourceVersion the caller loaded: that is the compare.
		cur, gerr := cms.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			return rev, fmt.Errorf("save %s: %w: it was deleted since it was loaded", s, ErrConflict)
		case gerr != nil:
			return rev, fmt.Errorf("save %s: %w", s, gerr)
		}
		cm := cur.DeepCopy()
		cm.ResourceVersion = strings.TrimPrefix(rev.Hash, rvPrefix)
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[ConfigMapKey] = string(data)
		out, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return rev, fmt.Errorf("save %s: %w: another writer changed it since it was loaded (resourceVersion %s); load it again and retry", s, ErrConflict, strings.TrimPrefix(rev.Hash, rvPrefix))
		}
	}
	if err != nil {
		return rev, fmt.Errorf("save %s: %w", s, err)
	}
	return Revision{Generation: rev.Generation + 1, Hash: rvPrefix + out.ResourceVersion}, nil
}

// Update is the package function Update on s.
func (s ConfigMapStore) Update(ctx context.Context, fn func(Catalog) (Catalog, error)) (Catalog, error) {
	return Update(ctx, s, fn)
}
