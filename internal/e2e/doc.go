// Package e2e holds tests that cross packages: the whole library wired as a
// host would wire it, against real servers.
package e2e
