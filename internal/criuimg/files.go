package criuimg

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/fdinfo"
	"golang.org/x/sys/unix"
)

type fileEntry = fdinfo.FileEntry

// loadFiles reads files.img, where CRIU (3.x and later) records every
// file object the fds, cwd, root and mappings refer to, by id. Read here
// rather than through crit's ExploreFds, which caches files.img in package
// variables: a second directory in the same process would be described
// with the first one's files.
func (r *reader) loadFiles() error {
	r.files = map[uint32]*fileEntry{}
	entries, err := readImage(r.dir, "files.img", &fdinfo.FileEntry{})
	if err != nil {
		return r.optional("files.img", err)
	}
	for _, e := range entries {
		f := e.(*fdinfo.FileEntry)
		r.files[f.GetId()] = f
	}
	return nil
}

// regName is the path of the regular file (or directory) with id.
func (r *reader) regName(id uint32) string {
	if f := r.files[id]; f != nil && f.GetReg() != nil {
		return f.GetReg().GetName()
	}
	return ""
}

// fds reads the process's fd table (fdinfo-<files id>.img; processes that
// share a table share the image) and describes each fd from files.img.
func (r *reader) fds(p *Process) error {
	ids, err := r.ids(p.PID)
	if err != nil || ids == nil {
		return err
	}
	name := fmt.Sprintf("fdinfo-%d.img", ids.GetFilesId())
	entries, err := readImage(r.dir, name, &fdinfo.FdinfoEntry{})
	if err != nil {
		return r.optional(name, err)
	}
	for _, e := range entries {
		fi := e.(*fdinfo.FdinfoEntry)
		fe := r.files[fi.GetId()]
		f := File{FD: int(fi.GetFd()), Type: fi.GetType().String(), Path: describe(fi.GetType(), fe)}
		p.Files = append(p.Files, f)
		if s, ok := socket(f.FD, fe); ok {
			p.Sockets = append(p.Sockets, s)
		}
	}
	return nil
}

// describe says what an fd is open on, as ls -l /proc/PID/fd would.
func describe(t fdinfo.FdTypes, f *fileEntry) string {
	if f == nil {
		return "?"
	}
	switch {
	case f.GetReg() != nil:
		return f.GetReg().GetName()
	case f.GetPipe() != nil:
		return fmt.Sprintf("pipe:[%d]", f.GetPipe().GetPipeId())
	case f.GetFifo() != nil:
		return fmt.Sprintf("fifo:[%d]", f.GetFifo().GetPipeId())
	}
	if s, ok := socket(0, f); ok {
		return s.String()
	}
	return strings.ToLower(t.String())
}

// socket decodes the socket parts of a file entry.
func socket(fd int, f *fileEntry) (Socket, bool) {
	switch {
	case f == nil:
		return Socket{}, false
	case f.GetIsk() != nil:
		s := f.GetIsk()
		return Socket{FD: fd, Family: family(s.GetFamily()), Type: sockType(s.GetType()), Protocol: protocol(s.GetProto()), State: tcpState(s.GetState(), s.GetProto()),
			Src: ip(s.GetSrcAddr()), SrcPort: int(s.GetSrcPort()), Dst: peer(s.GetDstAddr(), s.GetDstPort()), DstPort: int(s.GetDstPort())}, true
	case f.GetUsk() != nil:
		s := f.GetUsk()
		return Socket{FD: fd, Family: "UNIX", Type: sockType(s.GetType()), State: tcpState(s.GetState(), unix.IPPROTO_TCP), Src: unixName(s.GetName())}, true
	case f.GetPsk() != nil:
		return Socket{FD: fd, Family: "PACKET", Type: sockType(f.GetPsk().GetType())}, true
	case f.GetNlsk() != nil:
		return Socket{FD: fd, Family: "NETLINK", Protocol: fmt.Sprint(f.GetNlsk().GetProtocol())}, true
	}
	return Socket{}, false
}

// String is a socket in one line, as its open file's path reads:
// "TCP 127.0.0.1:80 (LISTEN)", "TCP 10.0.0.1:5000 -> 10.0.0.2:41234
// (ESTABLISHED)", "UNIX STREAM /run/s.sock (LISTEN)".
func (s Socket) String() string {
	var b strings.Builder
	if s.Family == "UNIX" {
		fmt.Fprintf(&b, "UNIX %s %s", s.Type, orDash(s.Src))
	} else {
		fmt.Fprintf(&b, "%s %s", cmp.Or(s.Protocol, s.Family), hostPort(s.Src, s.SrcPort))
		if s.DstPort != 0 {
			fmt.Fprintf(&b, " -> %s", hostPort(s.Dst, s.DstPort))
		}
	}
	if s.State != "" {
		fmt.Fprintf(&b, " (%s)", s.State)
	}
	return b.String()
}

func hostPort(addr string, port int) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Sprintf("%s:%d", orDash(addr), port)
	}
	return netip.AddrPortFrom(a, uint16(port)).String()
}

// ip turns CRIU's address words (the address's bytes in memory order,
// read as little-endian words) into text.
func ip(words []uint32) string {
	var b [16]byte
	switch len(words) {
	case 1:
		binary.LittleEndian.PutUint32(b[:], words[0])
		return netip.AddrFrom4([4]byte(b[:4])).String()
	case 4:
		for i, w := range words {
			binary.LittleEndian.PutUint32(b[4*i:], w)
		}
		return netip.AddrFrom16(b).String()
	}
	return ""
}

// peer is a connected socket's peer address; a listening or unconnected
// one has none (CRIU records the unspecified address, port 0).
func peer(words []uint32, port uint32) string {
	if port == 0 {
		return ""
	}
	return ip(words)
}

// unixName is a UNIX socket's address: a path, "@name" for the abstract
// namespace, empty for an unnamed one.
func unixName(name []byte) string {
	if len(name) > 0 && name[0] == 0 {
		return "@" + strings.TrimRight(string(name[1:]), "\x00")
	}
	return strings.TrimRight(string(name), "\x00")
}

func family(f uint32) string {
	switch f {
	case unix.AF_INET:
		return "IPv4"
	case unix.AF_INET6:
		return "IPv6"
	}
	return fmt.Sprint("AF ", f)
}

func sockType(t uint32) string {
	switch t {
	case unix.SOCK_STREAM:
		return "STREAM"
	case unix.SOCK_DGRAM:
		return "DGRAM"
	case unix.SOCK_SEQPACKET:
		return "SEQPACKET"
	case unix.SOCK_RAW:
		return "RAW"
	}
	return fmt.Sprint(t)
}

func protocol(p uint32) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "TCP"
	case unix.IPPROTO_UDP:
		return "UDP"
	case unix.IPPROTO_UDPLITE:
		return "UDPLITE"
	case unix.IPPROTO_ICMP:
		return "ICMP"
	case unix.IPPROTO_ICMPV6:
		return "ICMPV6"
	case unix.IPPROTO_RAW:
		return "RAW"
	}
	return ""
}

// tcpStates are the kernel's socket states (include/net/tcp_states.h),
// which UNIX stream sockets use too. A datagram socket's state says
// little, so only connection protocols get one.
var tcpStates = [...]string{1: "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV"}

func tcpState(state, proto uint32) string {
	if proto != unix.IPPROTO_TCP || int(state) >= len(tcpStates) {
		return ""
	}
	return tcpStates[state]
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
