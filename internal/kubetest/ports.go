package kubetest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
)

// Ports are picked below the kernel's ephemeral range, where no connect() or bind(:0) of
// another process lands, so the window between picking a port and the component binding it
// is only open to processes that choose ports the same way. (In one run of this package's
// tests on a busy shared machine, 3 of 6 ports picked with :0 could not be bound again a
// moment later.)
const lowestPort = 10000

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago.
//
// It holds all n listeners open until every port is picked, so the ports differ from each
// other; it then closes them so the components can bind. If another process still takes a
// port in between, the component fails to bind and Start retries with new ports.
func freePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	hi := ephemeralStart() // exclusive
	ports := make([]int, 0, n)
	for range n {
		l, err := listenBelow(hi)
		if err != nil {
			return nil, fmt.Errorf("pick a free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listenBelow listens on a random free port in [lowestPort, hi), or on any port (:0) when that
// range is too small or full.
func listenBelow(hi int) (net.Listener, error) {
	if hi-lowestPort >= 1000 {
		for range 50 {
			port := lowestPort + rand.IntN(hi-lowestPort)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ephemeralStart returns the first port of the kernel's ephemeral range (32768 by default).
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(data), &lo, &hi); err == nil && lo > 0 {
			return lo
		}
	}
	return 32768
}
