package embedded_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ovstream/ovstream/broker/embedded"
)

const helperEnv = "OVSTREAM_EMBEDDED_HELPER_DIR"

// TestHelperBroker is not a test: run by TestKill9KeepsAcknowledged in a child
// process, it serves a broker on DataDir until it is killed.
func TestHelperBroker(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("helper process only")
	}
	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"t": 2}, DataDir: dir})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("ADDR", b.Addr())
	select {}
}

func TestKill9KeepsAcknowledged(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBroker$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	sc := bufio.NewScanner(out)
	var addr string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			addr = a
			break
		}
		if strings.HasPrefix(sc.Text(), "ERROR") {
			t.Fatal(sc.Text())
		}
	}
	if addr == "" {
		t.Fatal("helper broker printed no address")
	}
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprintf("m%d", i))
	}
	produce(t, addr, "t", 0, want...)          // acks=all: each one acknowledged
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no Close, no flush
		t.Fatal(err)
	}
	_ = cmd.Wait()

	b, err := embedded.Start(embedded.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"t": 2}, DataDir: dir})
	if err != nil {
		t.Fatalf("restart after kill -9: %v", err)
	}
	defer b.Close()
	if got := readAll(t, b.Addr(), "t", 0); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after kill -9 read %v, want %v", got, want)
	}
}
