//go:build !benchlean

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// server is a long-running child process: etcd or MinIO.
type server struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's result, readable after exited closes
}

// startServer starts cmd with its output appended to logPath. The child
// gets a process group of its own, so a Ctrl-C meant for the bench reaches
// it only through stop, and dies with the bench (SIGKILL at the parent's
// death) so that no server outlives an aborted run.
func startServer(name string, cmd *exec.Cmd, logPath string) (*server, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = log
	}
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		_ = log.Close()
		close(s.exited)
	}()
	return s, nil
}

// stop sends SIGTERM, then SIGKILL after timeout, and waits for the exit.
func (s *server) stop(timeout time.Duration) error {
	select {
	case <-s.exited:
		return s.exitErr()
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return s.exitErr()
	case <-time.After(timeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("%s did not stop within %v and was killed", s.name, timeout)
	}
}

func (s *server) exitErr() error {
	var ee *exec.ExitError
	if errors.As(s.err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM {
		return nil
	}
	if s.err != nil {
		return fmt.Errorf("%s: %w", s.name, s.err)
	}
	return nil
}

// exitedEarly is the error for a server that exited before it was ready.
func exitedEarly(s *server) error {
	if s.err == nil {
		return fmt.Errorf("%s exited before it was ready", s.name)
	}
	return fmt.Errorf("%s exited before it was ready: %w", s.name, s.err)
}

// cpuSeconds returns the user and system CPU time the server has used.
func (s *server) cpuSeconds() float64 {
	sec, err := procCPUSeconds(s.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return sec
}

// procCPUSeconds reads utime+stime of a process from /proc/<pid>/stat.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(b)
}

// parseProcStatCPU extracts utime+stime (fields 14 and 15) from the text
// of /proc/<pid>/stat. The command name, field 2, may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseProcStatCPU(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("parse proc stat: no command field")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, errors.New("parse proc stat: too few fields")
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse proc stat: %w", err)
	}
	return float64(utime+stime) / clockTicks, nil
}

// busySeconds returns the CPU time spent by the whole machine outside
// idle and iowait, summed over all cores, from /proc/stat.
func busySeconds() float64 { busy, _ := statSeconds(); return busy }

// iowaitSeconds returns the time the machine's cores spent idle while
// a disk request of theirs was pending, summed over all cores, from
// /proc/stat.
func iowaitSeconds() float64 { _, wait := statSeconds(); return wait }

// statSeconds reads /proc/stat's busy and iowait seconds (parseCPULine);
// zeros when it cannot be read.
func statSeconds() (busy, iowait float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	busy, iowait, _ = parseCPULine(b)
	return busy, iowait
}

// parseBusy returns the busy seconds of /proc/stat's text (parseCPULine).
func parseBusy(b []byte) (float64, error) {
	busy, _, err := parseCPULine(b)
	return busy, err
}

// parseIOWait returns the iowait seconds of /proc/stat's text
// (parseCPULine).
func parseIOWait(b []byte) (float64, error) {
	_, iowait, err := parseCPULine(b)
	return iowait, err
}

// parseCPULine reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal (guest time is already in user).
// busy sums all but idle and iowait.
func parseCPULine(b []byte) (busy, iowait float64, err error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, errors.New("parse /proc/stat: no cpu line")
	}
	var sum, wait uint64
	for i, v := range f[1:9] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse /proc/stat: %w", err)
		}
		switch i {
		case 3: // idle
		case 4:
			wait = n
		default:
			sum += n
		}
	}
	return float64(sum) / clockTicks, float64(wait) / clockTicks, nil
}

// machineCPUs returns the number of cores /proc/stat counts (its "cpuN"
// lines), the cores its busy and iowait times are summed over; 0 when it
// cannot be read.
func machineCPUs() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	return countCPUs(b)
}

// countCPUs counts the "cpuN" lines of /proc/stat's text.
func countCPUs(b []byte) int {
	n := 0
	for line := range bytes.Lines(b) {
		if len(line) > 3 && bytes.HasPrefix(line, []byte("cpu")) && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}

// loadAverage returns the one-minute load average.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// memTotal returns the machine's memory in bytes.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuModel returns the processor's model name.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// freeAddr returns a loopback address no one listens on now. Another
// process may take it before the server binds it; callers retry.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitLine waits until r yields a line equal to want, or until ctx ends or
// the server exits.
func waitLine(ctx context.Context, r io.Reader, want string, s *server) error {
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if sc.Text() == want {
				found <- nil
				// Keep draining, so the child never blocks on a full pipe.
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		found <- fmt.Errorf("%s closed its output before %q", s.name, want)
	}()
	select {
	case err := <-found:
		return err
	case <-s.exited:
		return exitedEarly(s)
	case <-ctx.Done():
		return fmt.Errorf("wait for %s: %w", s.name, ctx.Err())
	}
}
