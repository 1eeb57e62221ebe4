package kubetest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kwok manages exactly the nodes that carry this annotation (its
// --manage-nodes-with-annotation-selector flag); it keeps them Ready and runs their pods.
const (
	KwokNodeAnnotation      = "kwok.x-k8s.io/node"
	KwokNodeAnnotationValue = "fake"
)

// addFakeNode creates a copy of node with the kwok annotation set. The caller's object is
// not modified. Status (capacity, allocatable) is kept on create; when allocatable is missing
// kwok fills in a huge one, so give it one to make scheduling meaningful.
func addFakeNode(ctx context.Context, cs kubernetes.Interface, node *corev1.Node) error {
	if node == nil || node.Name == "" {
		return fmt.Errorf("add node: the node needs a name")
	}
	n := node.DeepCopy()
	n.ResourceVersion = ""
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[KwokNodeAnnotation] = KwokNodeAnnotationValue
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("add node %q: %w", n.Name, err)
	}
	return nil
}

// removeNode deletes a node; one that is already gone is not an error.
func removeNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove node %q: %w", name, err)
	}
	return nil
}
