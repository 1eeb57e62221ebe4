// Package ciliumfake is one cluster with Cilium installed, as prebake mesh sees it through
// the Kubernetes API: a loopback HTTP server speaking the API's REST paths and JSON, driven
// by client-go unchanged, for the tests of the built-in status reader (mesh.ExecStatus) and
// of `prebake mesh apply`.
//
// It serves GET of the objects it holds (Secrets, ConfigMaps, Pods, DaemonSets,
// Deployments), LIST of Pods with a label selector, and the pods/exec subresource over
// WebSocket with the remote command protocol v5.channel.k8s.io, through apimachinery's
// wsstream as kube-apiserver's stream translator does (k8s.io/apiserver
// pkg/util/proxy/websocket.go, streamtranslator.go): stdout, stderr, and a metav1.Status
// on the error channel (NonZeroExitCode with the exit code as its cause).
//
// Where it is narrower than the real API, it refuses instead of pretending: writes are
// 405 MethodNotAllowed, SPDY exec (what clients fall back to against API servers older
// than 1.30) is 400 BadRequest, and unknown paths are 404. What the command run by exec
// prints is the test's script (Cluster.SetExec). Nothing is authenticated; ForbidExec
// answers exec with the 403 an API server gives a user without create on pods/exec.
package ciliumfake
