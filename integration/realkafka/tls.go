package realkafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLS is the PEM material NewTLS writes: a CA, a server certificate it
// signed for 127.0.0.1 and localhost, and a second CA that signed nothing
// (to show an untrusted certificate).
type TLS struct {
	CAFile         string // PEM certificate of the CA that signed the brokers' certificate
	OtherCAFile    string // PEM certificate of a CA that did not
	ServerKeyStore string // PEM: the server's PKCS#8 key, then its certificate (Kafka ssl.keystore.type=PEM)
}

// NewTLS generates the material into dir (ECDSA P-256, valid for a day).
func NewTLS(dir string) (*TLS, error) {
	t := &TLS{CAFile: filepath.Join(dir, "ca.pem"), OtherCAFile: filepath.Join(dir, "other-ca.pem"),
		ServerKeyStore: filepath.Join(dir, "server-keystore.pem")}
	caKey, caCert, caDER, err := newCA("ovstream test CA")
	if err != nil {
		return nil, err
	}
	_, _, otherDER, err := newCA("ovstream untrusted CA")
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("realkafka: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("realkafka: %w", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("realkafka: %w", err)
	}
	files := map[string][]*pem.Block{
		t.CAFile:         {{Type: "CERTIFICATE", Bytes: caDER}},
		t.OtherCAFile:    {{Type: "CERTIFICATE", Bytes: otherDER}},
		t.ServerKeyStore: {{Type: "PRIVATE KEY", Bytes: pk}, {Type: "CERTIFICATE", Bytes: der}, {Type: "CERTIFICATE", Bytes: caDER}},
	}
	for path, blocks := range files {
		var b []byte
		for _, bl := range blocks {
			b = append(b, pem.EncodeToMemory(bl)...)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("realkafka: %w", err)
		}
	}
	return t, nil
}

func newCA(name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("realkafka: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("realkafka: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, der, err
}
