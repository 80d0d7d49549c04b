//go:build integration

package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ovstream/ovstream/migrations"
)

// privatePG is a PostgreSQL cluster of the test's own (initdb in a temporary
// folder, a free port on 127.0.0.1, trust authentication), for the tests that
// stop, start or restart the server: the machine's PostgreSQL is never
// touched. It is stopped and removed when the test ends.
type privatePG struct {
	t    *testing.T
	bin  string // folder of initdb, pg_ctl
	Dir  string // data folder
	Port int
	as   []string // runs a command as the cluster's owner (root cannot run PostgreSQL)
	uid  int      // the owner's ids when as is set, else -1
	gid  int
}

// pgBinDir returns the folder of the newest installed PostgreSQL's server
// programs (Debian: /usr/lib/postgresql/N/bin), else the folder of pg_ctl on PATH.
func pgBinDir(t *testing.T) string {
	t.Helper()
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
		sort.Slice(dirs, func(i, j int) bool {
			a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
			b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
			return a < b
		})
		return dirs[len(dirs)-1]
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatal("outage tests need PostgreSQL's server programs (initdb, pg_ctl): install postgresql")
	return ""
}

// StartPrivatePG initializes and starts a private cluster, with the lines
// conf (such as "max_prepared_transactions = 16") added to its
// postgresql.conf.
func StartPrivatePG(t *testing.T, conf ...string) *privatePG {
	t.Helper()
	p := newPrivatePG(t)
	p.Run("initdb", "-D", p.Dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	p.appendConf("postgresql.conf", p.baseConf()+strings.Join(conf, "\n")+"\n")
	p.Start()
	return p
}

// newPrivatePG reserves a temporary folder owned by the cluster's user and a
// free port, with no data folder yet. At the test's end the cluster in it is
// stopped (immediate) and the folder removed.
func newPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	p := &privatePG{t: t, bin: pgBinDir(t), uid: -1, gid: -1}
	dir, err := os.MkdirTemp("", "ovstream-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p.Dir = filepath.Join(dir, "data")
	if os.Geteuid() == 0 { // initdb refuses root: run the cluster as postgres
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the private cluster needs the user postgres: %v", err)
		}
		p.uid, _ = strconv.Atoi(u.Uid)
		p.gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(dir, p.uid, p.gid); err != nil {
			t.Fatal(err)
		}
		p.as = []string{"runuser", "-u", "postgres", "--"}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	t.Cleanup(func() {
		c := p.cmd("pg_ctl", "-D", p.Dir, "-m", "immediate", "-w", "stop")
		_ = exec.Command(c[0], c[1:]...).Run()
	})
	return p
}

// baseConf is the settings every private cluster gets: its port, 127.0.0.1
// only, its socket in its own folder, no fsync (nothing here survives a
// machine crash, and a SIGKILL loses nothing the kernel holds).
func (p *privatePG) baseConf() string {
	return fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n"+
		"max_connections = 50\nshared_buffers = 32MB\n", p.Port, filepath.Dir(p.Dir))
}

// appendConf appends text to the file name of the data folder (created
// when missing, owned by the cluster's user).
func (p *privatePG) appendConf(name, text string) {
	p.t.Helper()
	p.writeConf(name, text, os.O_APPEND)
}

// writeConf writes text into the file name of the data folder: appended
// (flag os.O_APPEND) or replacing it (os.O_TRUNC).
func (p *privatePG) writeConf(name, text string, flag int) {
	p.t.Helper()
	path := filepath.Join(p.Dir, name)
	f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o600)
	if err == nil && p.uid >= 0 {
		err = os.Chown(path, p.uid, p.gid)
	}
	if err == nil {
		_, err = f.WriteString(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		p.t.Fatal(err)
	}
}

func (p *privatePG) cmd(prog string, args ...string) []string {
	return append(append(append([]string{}, p.as...), filepath.Join(p.bin, prog)), args...)
}

// Run runs the PostgreSQL program prog (initdb, pg_ctl, ...) of the
// cluster's installation with args; the test fails if it fails.
func (p *privatePG) Run(prog string, args ...string) {
	p.t.Helper()
	c := p.cmd(prog, args...)
	if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
		p.t.Fatalf("%v: %v\n%s", c, err, out)
	}
}

// LogPath is the server's log file.
func (p *privatePG) LogPath() string { return filepath.Join(filepath.Dir(p.Dir), "log") }

// Start starts the cluster and waits until it accepts connections.
func (p *privatePG) Start() {
	p.t.Helper()
	p.Run("pg_ctl", "-D", p.Dir, "-l", p.LogPath(), "-w", "-t", "60", "start")
}

// Stop stops it (fast: every session is terminated, open transactions roll back).
func (p *privatePG) Stop() {
	p.t.Helper()
	p.Run("pg_ctl", "-D", p.Dir, "-m", "fast", "-w", "-t", "60", "stop")
}

// Restart stops and starts it.
func (p *privatePG) Restart() {
	p.t.Helper()
	began := time.Now()
	p.Stop() // not pg_ctl restart: without -l the server would keep our output pipe open
	p.Start()
	p.t.Logf("private PostgreSQL on port %d restarted in %v", p.Port, time.Since(began).Round(time.Millisecond))
}

// Ready tells whether it accepts connections.
func (p *privatePG) Ready() bool {
	return exec.Command(filepath.Join(p.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port)).Run() == nil
}

// FreshDB creates a database with every migration applied and returns its URL.
func (p *privatePG) FreshDB() string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE ovs"); err != nil {
		p.t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/ovs?sslmode=disable", p.Port)
	if err := migrations.Up(ctx, url); err != nil {
		p.t.Fatal(err)
	}
	return url
}
