package bootstrap

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// StandbyResume is how a warm-pool standby (Options.Standby) gets the user-data it is
// resumed with and says it is prepared, as its provider declares it
// (providers.Capabilities.StandbyResume is this type).
//
// cloud-init runs a machine's user-data once per instance-id. A provider that can give the
// stopped machine a new instance-id with the new user-data needs nothing on the machine
// (ResumeBySeed: docker writes a new NoCloud seed, and reads the status file itself). On a
// cloud whose instance-id survives stop/start and suspend/resume (GCE), the new user-data
// would never run; ResumeByGCEMetadata installs a hook that runs it. Where the user-data can't
// change at all and the machine can't learn of its join by itself (Hetzner), the provider
// logs in and runs the script (ResumeBySSH).
type StandbyResume string

const (
	// ResumeBySeed: nothing on the machine. The provider reads the status file and starts
	// the machine with the new user-data under a new instance-id.
	ResumeBySeed StandbyResume = ""
	// ResumeByGCEMetadata: the standby's script installs prebake-resume.service
	// (standby-resume.sh) and enables and starts it. At every boot, and all along while the
	// machine runs (a resumed suspended VM continues without a boot), it waits on the
	// metadata server for the instance's user-data to change; the first user-data whose node
	// script joins has that script written to ScriptPath and run, once. The standby's status
	// file goes to the guest attribute StandbyAttribute (the provider reads it with
	// instances.getGuestAttributes; the instance needs enable-guest-attributes=TRUE) when it
	// is prepared or failed. The hook needs curl and python3 with PyYAML (cloud-init's own
	// dependency); the script checks them before it says prepared.
	ResumeByGCEMetadata StandbyResume = "gce-metadata"
	// ResumeBySSH: nothing on the machine; its provider reaches it over SSH. A Hetzner
	// server's user_data is fixed at create and a server can't read its own labels without a
	// project token, so the provider puts a host key of its making and its own login key in
	// the standby's cloud-config (WithSSHAccess), reads the status file with
	// StandbyStatusCommand, and when the standby is taken pipes the node script of the
	// cloud-config it is resumed with (NodeScript) to StandbyJoinCommand.
	ResumeBySSH StandbyResume = "ssh"
)

// The commands a ResumeBySSH provider runs on a standby, as root.
const (
	// StandbyStatusCommand prints the status file (Status as JSON); nothing while the script
	// has written none.
	StandbyStatusCommand = "cat " + DefaultStatusPath + " 2>/dev/null || true"
	// StandbyJoinCommand reads the node script on its stdin, writes it to ScriptPath (root
	// only, where cloud-init wrote the standby's own) and starts it as the transient unit
	// prebake-join.service (/bin/sh by its absolute path, as older systemd wants an
	// ExecStart=), as cloud-init's runcmd would run it, and returns once the unit is started:
	// the join runs on without the connection, so it outlives a provider call's deadline.
	// While a unit of that name exists, a second start fails.
	StandbyJoinCommand = "umask 077 && cat >" + ScriptPath + ".new && mv -f " + ScriptPath + ".new " + ScriptPath +
		" && systemd-run --unit=prebake-join --collect --quiet /bin/sh " + ScriptPath
)

// Where ResumeByGCEMetadata puts its hook, and the guest attribute its report goes to.
const (
	StandbyResumeUnitPath   = "/etc/systemd/system/" + StandbyResumeUnit
	StandbyResumeUnit       = "prebake-resume.service"
	StandbyResumeScriptPath = "/usr/local/lib/prebake/standby-resume"
	// StandbyTakenPath exists once the hook ran a joining script: the machine is a node.
	StandbyTakenPath = "/var/lib/prebake/standby-taken"
	// StandbyAttribute is "<namespace>/<key>" of the guest attribute holding a GCE
	// standby's status file (Status as JSON).
	StandbyAttribute = "prebake/standby"
)

//go:embed standby-resume.sh
var standbyResumeScript string

// standbyResumeUnit runs the hook at every boot once the network is up. It is not ordered
// after cloud-final.service: the standby's own script, which runs inside cloud-final, starts
// it. Once the hook ran a join it exits at once, and the condition keeps it from starting.
const standbyResumeUnit = `[Unit]
Description=prebake warm-pool standby: join once resumed with new user-data
Documentation=https://github.com/prebake-dev/prebake/blob/main/docs/warm-pool.md
Wants=network-online.target
After=network-online.target
ConditionPathExists=!` + StandbyTakenPath + `

[Service]
Type=simple
ExecStart=` + StandbyResumeScriptPath + `
Restart=on-failure
RestartSec=2

[Install]
WantedBy=multi-user.target
`

// validate checks r against the rest of the input.
func (r StandbyResume) validate(standby bool, bad func(format string, args ...any)) {
	switch {
	case r == ResumeBySeed:
	case r != ResumeByGCEMetadata && r != ResumeBySSH:
		bad("standbyResume %q: want %q, %q or empty (the provider gives the stopped machine a new instance-id)", string(r), ResumeByGCEMetadata, ResumeBySSH)
	case !standby:
		bad("standbyResume %q: only a warm-pool standby's user-data (options.standby) is resumed", string(r))
	}
}

// standbyFiles are the hook's files for a standby that needs one.
func standbyFiles(in Input) []file {
	if !in.Options.Standby || in.StandbyResume != ResumeByGCEMetadata {
		return nil
	}
	return []file{
		{StandbyResumeScriptPath, "0755", "standby", standbyResumeScript},
		{StandbyResumeUnitPath, "0644", "standby", standbyResumeUnit},
	}
}

// NodeScript returns the node script of a cloud-config Render made: its write_files entry at
// ScriptPath. A ResumeBySSH provider is handed the cloud-config a created machine would get,
// and runs this script of it itself. A cloud-config without one (a userDataFile's) is an
// error: there is nothing prebake knows how to run. The errors never quote the user-data
// (it holds a join token).
func NodeScript(userData []byte) ([]byte, error) {
	body, ok := bytes.CutPrefix(userData, []byte("#cloud-config\n"))
	if !ok {
		return nil, errors.New("bootstrap: the user-data is no #cloud-config, so it holds no node script")
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(body, &cc); err != nil {
		return nil, errors.New("bootstrap: the user-data is no valid cloud-config YAML, so its node script can't be read")
	}
	for _, f := range cc.WriteFiles {
		if f.Path == ScriptPath && f.Content != "" {
			return []byte(f.Content), nil
		}
	}
	return nil, fmt.Errorf("bootstrap: the cloud-config writes no node script to %s: it is not what bootstrap renders (a userDataFile?), and a standby resumed over SSH runs that script", ScriptPath)
}
