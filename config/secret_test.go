package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cases set environment variables, so they can't run in parallel.
func TestSecretRefResolve(t *testing.T) {
	const secret = "s3cr3t-t0ken"
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenFile := write("token", secret+"\n")
	emptyFile := write("empty", " \n")
	t.Setenv("PREBAKE_TEST_TOKEN", "  "+secret+"  ")
	t.Setenv("PREBAKE_TEST_EMPTY", "")

	tests := []struct {
		name    string
		ref     SecretRef
		want    string
		wantErr string // substring; the error must never contain the secret
	}{
		{name: "file, trailing newline trimmed", ref: SecretRef{File: tokenFile}, want: secret},
		{name: "env, spaces trimmed", ref: SecretRef{Env: "PREBAKE_TEST_TOKEN"}, want: secret},
		{name: "both set", ref: SecretRef{File: tokenFile, Env: "PREBAKE_TEST_TOKEN"}, wantErr: "set either file or env, not both"},
		{name: "neither set", ref: SecretRef{}, wantErr: "set file (a path) or env (a variable name)"},
		{name: "missing file", ref: SecretRef{File: filepath.Join(dir, "nope")}, wantErr: `secret file "` + filepath.Join(dir, "nope") + `": no such file or directory`},
		{name: "empty file", ref: SecretRef{File: emptyFile}, wantErr: `secret file "` + emptyFile + `" is empty`},
		{name: "unset env", ref: SecretRef{Env: "PREBAKE_TEST_UNSET_VARIABLE"}, wantErr: `secret env "PREBAKE_TEST_UNSET_VARIABLE": the environment variable is not set`},
		{name: "empty env", ref: SecretRef{Env: "PREBAKE_TEST_EMPTY"}, wantErr: `secret env "PREBAKE_TEST_EMPTY": the environment variable is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.ref.Resolve()
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Errorf("Resolve() = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Resolve() = %q, want an error containing %q", got, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q leaks the secret", err)
			}
			if got != "" {
				t.Errorf("Resolve returned %q with an error", got)
			}
		})
	}
}
