package restore

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// etcd's backend opens its database for writing and commits at once,
// which frees and allocates pages through bbolt's free list: a free list
// that names a meta page, a page past the end of the file or a page still
// in use panics there, inside a transaction whose lock is then never
// released. checkFreelist reads the free list and the page tree of the
// file itself (bbolt's format, which bbolt exports no reader for) and
// refuses such a list first. Its memory is one bit per page of the file.

// Layout of a bbolt page (see bbolt's internal/common).
const (
	pageHeaderSize  = 16
	pageElementSize = 16
	branchPageFlag  = 0x01
	leafPageFlag    = 0x02
	bucketLeafFlag  = 0x01
	noFreelist      = ^uint64(0)
	// A free list of more ids than a uint16 holds stores its count in its
	// first element.
	freelistCountOverflow = 0xFFFF
)

// boltFile reads pages of a bbolt file.
type boltFile struct {
	f        *os.File
	pageSize int
	pages    uint64 // the meta's high-water mark
}

// page reads the header of page id, or the whole page (with its
// overflow) when full is set.
func (b *boltFile) page(id uint64, full bool) (flags uint16, count int, overflow uint32, data []byte, err error) {
	if id >= b.pages {
		return 0, 0, 0, nil, fmt.Errorf("page %d is past the high-water mark %d", id, b.pages)
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := b.f.ReadAt(hdr, int64(id)*int64(b.pageSize)); err != nil {
		return 0, 0, 0, nil, fmt.Errorf("read page %d: %w", id, err)
	}
	flags, count, overflow = binary.LittleEndian.Uint16(hdr[8:]), int(binary.LittleEndian.Uint16(hdr[10:])), binary.LittleEndian.Uint32(hdr[12:])
	if id+uint64(overflow) >= b.pages {
		return 0, 0, 0, nil, fmt.Errorf("page %d overflows past the high-water mark %d", id, b.pages)
	}
	if !full {
		return flags, count, overflow, nil, nil
	}
	data = make([]byte, (int(overflow)+1)*b.pageSize)
	if _, err := b.f.ReadAt(data, int64(id)*int64(b.pageSize)); err != nil && err != io.EOF {
		return 0, 0, 0, nil, fmt.Errorf("read page %d: %w", id, err)
	}
	return flags, count, overflow, data, nil
}

// checkFreelist checks the free list of the meta of transaction txid in
// the bbolt file at path: every id a page of the file that is no meta
// page, in ascending order, once, and on no page the bucket tree uses.
func checkFreelist(ctx context.Context, path string, txid uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b := &boltFile{f: f}
	root, freelist, err := b.readMeta(txid)
	if err != nil {
		return err
	}
	used := make([]uint64, (b.pages+63)/64)
	mark := func(id uint64, overflow uint32) error {
		for i := id; i <= id+uint64(overflow); i++ {
			if used[i/64]&(1<<(i%64)) != 0 {
				return fmt.Errorf("page %d is used twice", i)
			}
			used[i/64] |= 1 << (i % 64)
		}
		return nil
	}
	mark(0, 1) // both metas
	if err := b.walk(ctx, root, true, mark); err != nil {
		return err
	}
	if freelist == noFreelist {
		return nil
	}
	_, count, overflow, data, err := b.page(freelist, true)
	if err != nil {
		return fmt.Errorf("free list: %w", err)
	}
	if err := mark(freelist, overflow); err != nil {
		return fmt.Errorf("free list: %w", err)
	}
	ids := data[pageHeaderSize:]
	if count == freelistCountOverflow {
		count, ids = int(binary.LittleEndian.Uint64(ids)), ids[8:]
	}
	if count < 0 || count > len(ids)/8 {
		return fmt.Errorf("free list of %d ids does not fit its page", count)
	}
	var last uint64
	for i := range count {
		id := binary.LittleEndian.Uint64(ids[8*i:])
		switch {
		case id < 2 || id >= b.pages:
			return fmt.Errorf("free list: page %d is not a page of the file (2 to %d)", id, b.pages-1)
		case i > 0 && id <= last:
			return fmt.Errorf("free list: page %d after page %d", id, last)
		case used[id/64]&(1<<(id%64)) != 0:
			return fmt.Errorf("free list: page %d is in use", id)
		}
		last = id
	}
	return nil
}

// readMeta reads the meta page of transaction txid: its page size, root
// bucket page, free list page and high-water mark.
func (b *boltFile) readMeta(txid uint64) (root, freelist uint64, err error) {
	hdr := make([]byte, pageHeaderSize+64)
	if _, err := b.f.ReadAt(hdr, 0); err != nil {
		return 0, 0, fmt.Errorf("read meta: %w", err)
	}
	b.pageSize = int(binary.LittleEndian.Uint32(hdr[pageHeaderSize+8:]))
	if b.pageSize < 512 || b.pageSize > 1<<20 {
		return 0, 0, fmt.Errorf("page size %d", b.pageSize)
	}
	for i := range int64(2) {
		m := make([]byte, 64)
		if _, err := b.f.ReadAt(m, i*int64(b.pageSize)+pageHeaderSize); err != nil {
			return 0, 0, fmt.Errorf("read meta: %w", err)
		}
		if binary.LittleEndian.Uint64(m[48:]) == txid {
			b.pages = binary.LittleEndian.Uint64(m[40:])
			return binary.LittleEndian.Uint64(m[16:]), binary.LittleEndian.Uint64(m[32:]), nil
		}
	}
	return 0, 0, fmt.Errorf("no meta page of transaction %d", txid)
}

// walk marks every page of the bucket tree under page id. Only the root
// bucket's leaves are read: etcd's buckets hold no buckets (walkBuckets
// refused those).
func (b *boltFile) walk(ctx context.Context, id uint64, rootBucket bool, mark func(uint64, uint32) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	full := rootBucket
	flags, _, overflow, _, err := b.page(id, false)
	if err != nil {
		return err
	}
	if flags&branchPageFlag != 0 {
		full = true
	}
	if err := mark(id, overflow); err != nil {
		return err
	}
	if !full {
		return nil
	}
	flags, count, _, data, err := b.page(id, true)
	if err != nil {
		return err
	}
	if count*pageElementSize > len(data)-pageHeaderSize {
		return fmt.Errorf("page %d: %d elements do not fit", id, count)
	}
	for i := range count {
		e := pageHeaderSize + i*pageElementSize
		switch {
		case flags&branchPageFlag != 0:
			if err := b.walk(ctx, binary.LittleEndian.Uint64(data[e+8:]), rootBucket, mark); err != nil {
				return err
			}
		case flags&leafPageFlag != 0 && binary.LittleEndian.Uint32(data[e:])&bucketLeafFlag != 0:
			pos := e + int(binary.LittleEndian.Uint32(data[e+4:])) + int(binary.LittleEndian.Uint32(data[e+8:]))
			if pos < 0 || pos+8 > len(data) {
				return fmt.Errorf("page %d: bucket element %d out of the page", id, i)
			}
			if sub := binary.LittleEndian.Uint64(data[pos:]); sub != 0 { // 0: an inline bucket
				if err := b.walk(ctx, sub, false, mark); err != nil {
					return err
				}
			}
		case flags&leafPageFlag == 0:
			return fmt.Errorf("page %d is no branch or leaf page (flags %#x)", id, flags)
		}
	}
	return nil
}
