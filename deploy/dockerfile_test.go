package deploy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
	line      int
}

func parseDockerfile(src string) []instruction {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continuation
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start})
		cur.Reset()
	}
	return out
}

// dockerfileProblems checks the Dockerfile's shape: base images as build
// args with the usual defaults, a static trimmed build with the Makefile's
// version flags, and a runtime stage with no shell and a non-root user.
// ldflagVars are the -X variables the Makefile sets.
func dockerfileProblems(src string, ldflagVars []string) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	var stages [][]instruction
	globalArgs := map[string]string{}
	for _, in := range parseDockerfile(src) {
		switch {
		case in.cmd == "FROM":
			stages = append(stages, []instruction{in})
		case len(stages) == 0 && in.cmd == "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			globalArgs[name] = def
		case len(stages) == 0:
			add("line %d: %s before the first FROM", in.line, in.cmd)
		default:
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if d := globalArgs["GO_IMAGE"]; !strings.HasPrefix(d, "golang:") {
		add("ARG GO_IMAGE default = %q, want a golang: image", d)
	}
	if d := globalArgs["RUNTIME_IMAGE"]; !strings.Contains(d, "distroless/static") || !strings.HasSuffix(d, ":nonroot") {
		add("ARG RUNTIME_IMAGE default = %q, want distroless static :nonroot", d)
	}
	if len(stages) != 2 {
		add("%d stages, want 2 (build, runtime)", len(stages))
		return problems
	}
	build, runtime := stages[0], stages[1]
	if from := build[0].args; !regexp.MustCompile(`^\$\{?GO_IMAGE\}? AS build$`).MatchString(from) {
		add("build stage: FROM %s, want FROM ${GO_IMAGE} AS build", from)
	}
	if from := runtime[0].args; !regexp.MustCompile(`^\$\{?RUNTIME_IMAGE\}?$`).MatchString(from) {
		add("runtime stage: FROM %s, want FROM ${RUNTIME_IMAGE}", from)
	}
	var goBuild string
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/prebake"} {
		if !strings.Contains(goBuild, want) {
			add("build stage: go build lacks %s", want)
		}
	}
	for _, v := range ldflagVars {
		if !strings.Contains(goBuild, "-X "+v+"=") {
			add("build stage: go build does not set %s (the Makefile's LDFLAGS do)", v)
		}
	}
	user := ""
	for _, in := range runtime[1:] {
		switch in.cmd {
		case "RUN", "SHELL":
			add("runtime stage line %d: %s needs a shell; the runtime image has none", in.line, in.cmd)
		case "USER":
			user = in.args
		case "ENTRYPOINT", "CMD":
			if !strings.HasPrefix(in.args, "[") {
				add("runtime stage line %d: %s in shell form runs /bin/sh; use the exec form [\"...\"]", in.line, in.cmd)
			}
		case "COPY", "ADD":
			if !strings.Contains(in.args, "--from=build") {
				add("runtime stage line %d: %s from the context; copy only the binary from the build stage", in.line, in.cmd)
			}
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(uid) {
		add("runtime stage: USER %q, want a numeric non-root uid (runAsNonRoot can only check numbers)", user)
	}
	return problems
}

// makefileLDFlagVars returns the variables the Makefile's LDFLAGS set with -X.
func makefileLDFlagVars(t *testing.T) []string {
	t.Helper()
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var vars []string
	for _, m := range regexp.MustCompile(`(?m)^LDFLAGS :=.*$`).FindAllString(string(mk), -1) {
		for _, x := range regexp.MustCompile(`-X (\S+)=`).FindAllStringSubmatch(m, -1) {
			vars = append(vars, x[1])
		}
	}
	if len(vars) == 0 {
		t.Fatal("no -X flags in the Makefile's LDFLAGS")
	}
	return vars
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range dockerfileProblems(string(src), makefileLDFlagVars(t)) {
		t.Error(p)
	}
	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(ignore), "\n")
	for _, want := range []string{".git/", "bin/", "deploy/components/mtls-files/tls/", "**/*.key"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}

func TestDockerfileCheckFails(t *testing.T) {
	t.Parallel()
	bad := `FROM golang:1.26
RUN go build -o /prebake ./cmd/prebake
FROM gcr.io/distroless/static-debian12
COPY . /
RUN chmod +x /prebake
USER root
ENTRYPOINT /prebake serve
`
	got := dockerfileProblems(bad, []string{"example.com/version.Version"})
	for _, want := range []string{
		"ARG GO_IMAGE", "ARG RUNTIME_IMAGE", "FROM golang:1.26", "FROM gcr.io", "lacks CGO_ENABLED=0", "lacks -trimpath",
		"does not set example.com/version.Version", "RUN needs a shell", "copy only the binary", `USER "root"`, "ENTRYPOINT in shell form",
	} {
		if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem mentioning %q in:\n  %s", want, strings.Join(got, "\n  "))
		}
	}
}
