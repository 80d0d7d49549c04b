//go:build integration

package integration

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
	dir  string // data folder
	port int
	as   []string // runs a command as the cluster's owner (root cannot run PostgreSQL)
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

// startPrivatePG initializes and starts a private cluster.
func startPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	p := &privatePG{t: t, bin: pgBinDir(t)}
	dir, err := os.MkdirTemp("", "ovstream-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p.dir = filepath.Join(dir, "data")
	if os.Geteuid() == 0 { // initdb refuses root: run the cluster as postgres
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the private cluster needs the user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.as = []string{"runuser", "-u", "postgres", "--"}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	p.run("initdb", "-D", p.dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	conf := fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n"+
		"max_connections = 50\nshared_buffers = 32MB\n", p.port, dir)
	f, err := os.OpenFile(filepath.Join(p.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	p.start()
	t.Cleanup(func() {
		c := p.cmd("pg_ctl", "-D", p.dir, "-m", "immediate", "-w", "stop")
		_ = exec.Command(c[0], c[1:]...).Run()
	})
	return p
}

func (p *privatePG) cmd(prog string, args ...string) []string {
	return append(append(append([]string{}, p.as...), filepath.Join(p.bin, prog)), args...)
}

func (p *privatePG) run(prog string, args ...string) {
	p.t.Helper()
	c := p.cmd(prog, args...)
	if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
		p.t.Fatalf("%v: %v\n%s", c, err, out)
	}
}

// start starts the cluster and waits until it accepts connections.
func (p *privatePG) start() {
	p.t.Helper()
	p.run("pg_ctl", "-D", p.dir, "-l", filepath.Join(filepath.Dir(p.dir), "log"), "-w", "-t", "60", "start")
}

// stop stops it (fast: every session is terminated, open transactions roll back).
func (p *privatePG) stop() {
	p.t.Helper()
	p.run("pg_ctl", "-D", p.dir, "-m", "fast", "-w", "-t", "60", "stop")
}

// restart stops and starts it.
func (p *privatePG) restart() {
	p.t.Helper()
	began := time.Now()
	p.stop() // not pg_ctl restart: without -l the server would keep our output pipe open
	p.start()
	p.t.Logf("private PostgreSQL on port %d restarted in %v", p.port, time.Since(began).Round(time.Millisecond))
}

// ready tells whether it accepts connections.
func (p *privatePG) ready() bool {
	return exec.Command(filepath.Join(p.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(p.port)).Run() == nil
}

// freshDB creates a database with every migration applied and returns its URL.
func (p *privatePG) freshDB() string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE ovs"); err != nil {
		p.t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/ovs?sslmode=disable", p.port)
	if err := migrations.Up(ctx, url); err != nil {
		p.t.Fatal(err)
	}
	return url
}
