package realkafka

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// PomProperty returns the text of the element <name> of pom, one of its
// properties (kafka.version); it panics naming pkg when pom has none, since
// the pom is embedded in the binary.
func PomProperty(pkg string, pom []byte, name string) string {
	m := regexp.MustCompile(`<` + regexp.QuoteMeta(name) + `>([^<]+)</` + regexp.QuoteMeta(name) + `>`).FindSubmatch(pom)
	if m == nil {
		panic(pkg + ": pom.xml names no " + name)
	}
	return string(m[1])
}

// PeerCacheDir is the cache folder of a Java peer: CacheFolder
// NAME-VERSION-<12 hex digits of the SHA-256 of files>, so that a change
// of its pom or its Main.java makes a new one.
func PeerCacheDir(name, version string, files ...[]byte) (string, error) {
	h := sha256.New()
	for _, f := range files {
		h.Write(f)
	}
	return CacheFolder(fmt.Sprintf("%s-%s-%x", name, version, h.Sum(nil)[:6]))
}

// PeerClasspath is the class path of a Java peer built by BuildJavaPeer into
// the cache folder dir: its compiled classes, then its jars.
func PeerClasspath(dir string) string {
	return filepath.Join(dir, "classes") + string(os.PathListSeparator) + filepath.Join(dir, "jars", "*")
}

// BuildJavaPeer fills work, the work folder of FillOnce, with a Java peer:
// it writes pom.xml and Main.java, runs `mvn -q -B -f work/pom.xml` with
// mvnArgs, which must copy the jars into the folder jars (given as
// -DoutputDirectory=jarsDir), then compiles Main.java with javac into
// classes against them. It returns the jars copied; the error names what
// failed, and what (the peer's name) for mvn.
func BuildJavaPeer(work, javac, what string, pom, mainJava []byte, mvnArgs func(jarsDir string) []string) ([]string, error) {
	for name, b := range map[string][]byte{"pom.xml": pom, "Main.java": mainJava} {
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	jarsDir := filepath.Join(work, "jars")
	cmd := exec.Command("mvn", append([]string{"-q", "-B", "-f", filepath.Join(work, "pom.xml")}, mvnArgs(jarsDir)...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mvn %s of %s: %v\n%s", cmd.Args[5], what, err, b)
	}
	jars, _ := filepath.Glob(filepath.Join(jarsDir, "*.jar"))
	if len(jars) == 0 {
		return nil, errors.New("mvn copied no jar of " + what)
	}
	cmd = exec.Command(javac, "-d", filepath.Join(work, "classes"), "-cp", filepath.Join(jarsDir, "*"), filepath.Join(work, "Main.java"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("javac Main.java: %v\n%s", err, b)
	}
	return jars, nil
}

// ProcStatusKB returns a "kB" field of /proc/PID/status (VmHWM: the peak
// RSS, VmRSS), 0 when unreadable: how the benchmark measures its peers' and
// its own processes' memory.
func ProcStatusKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
