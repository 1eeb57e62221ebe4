// Package timeline turns what the e2e runs measured into per-phase statistics and writes the
// timeline report (e2e/out/timeline.md and timeline.json).
//
// Invariant: a Stat holds only measured durations. The simulated boot time of the kwok
// provider is a configured input; it is reported as an Input, in its own section, and the
// only phase derived from it is "registration beyond the simulated boot", which subtracts it.
package timeline
