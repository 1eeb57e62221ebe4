package static

import "testing"

func TestRemoteCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    Machine
		want string
	}{
		{name: "root", m: Machine{Host: "node-1", User: "root"},
			want: "env PREBAKE_PROVIDER_ID=static://node-1 PREBAKE_HOST=node-1 PREBAKE_NODE_LABELS= sh -s"},
		{name: "sudo and sorted labels", m: Machine{Host: "node-1", User: "admin", Labels: map[string]string{"rack": "r1", "example.com/disk": "nvme"}},
			want: "sudo -n env PREBAKE_PROVIDER_ID=static://node-1 PREBAKE_HOST=node-1 PREBAKE_NODE_LABELS=example.com/disk=nvme,rack=r1 sh -s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := remoteCommand(tc.m); got != tc.want {
				t.Errorf("remoteCommand = %q, want %q", got, tc.want)
			}
		})
	}
}
