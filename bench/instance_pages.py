"""What each Wasm instance of a running Tessera holds in memory of its own, page by page, from
`/proc/<pid>/pagemap`: every instance's linear memory starts with a copy-on-write mapping of its component's
memory image (`memfd:wasm-memory-image`), shared by all instances of that component until an instance writes
to a page, and continues with pages of its own when the memory grows past the image.

For each instance: the image's pages resident in its mapping, how many of those it has copied (written to),
and its resident pages past the image; with `--diff`, for the first instance, how its copied pages differ from
the image (a page whose words all match was written back unchanged, e.g. a reference count raised and
lowered). Run as root, against a server whose models have answered:

    .venv/bin/python bench/instance_pages.py PID [--diff]
"""

import argparse
import struct

PAGE = 4096
PRESENT = 1 << 63
FILE_OR_SHARED = 1 << 61  # clear on a present page of a private mapping: the page was copied


def mappings(pid):
    """(start, end, file offset, the range as /proc/<pid>/map_files names it, the adjacent anonymous
    mapping after it or None) of each memory-image mapping, in address order."""
    lines = open(f"/proc/{pid}/maps").read().splitlines()
    found = []
    for index, line in enumerate(lines):
        if "wasm-memory-image" not in line:
            continue
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        after = None
        if index + 1 < len(lines):
            next_start, next_end = (int(x, 16) for x in lines[index + 1].split()[0].split("-"))
            if next_start == end and len(lines[index + 1].split()) == 5:  # anonymous and adjacent: the rest
                after = (next_start, next_end)
        found.append((start, end, int(fields[2], 16), fields[0], after))
    return found


def entries(pagemap, start, end):
    """The pagemap entries of the pages in [start, end)."""
    count = (end - start) // PAGE
    pagemap.seek(start // PAGE * 8)
    return struct.unpack(f"{count}Q", pagemap.read(count * 8))


def past_image_pages(pagemap, after, limit=1 << 16):
    """Resident pages in the first `limit` pages of the reservation after the image (where growth lands)."""
    if after is None:
        return 0
    start, end = after
    return sum(1 for e in entries(pagemap, start, min(end, start + limit * PAGE)) if e & PRESENT)


def describe_copies(pid, pages, start, offset, name):
    """How the copied pages of one mapping (`pages`: its pagemap entries) differ from the image they were
    copied from."""
    changed_words = []
    with open(f"/proc/{pid}/map_files/{name}", "rb") as image, open(f"/proc/{pid}/mem", "rb") as memory:
        for index, entry in enumerate(pages):
            if not entry & PRESENT or entry & FILE_OR_SHARED:
                continue
            image.seek(offset + index * PAGE)
            original = image.read(PAGE)
            if len(original) < PAGE:
                continue
            memory.seek(start + index * PAGE)
            words = zip(struct.unpack(f"{PAGE // 4}I", original), struct.unpack(f"{PAGE // 4}I", memory.read(PAGE)))
            changed_words.append(sum(1 for a, b in words if a != b))
    if not changed_words:
        return "no copied pages"
    changed_words.sort()
    return (f"{len(changed_words)} copied pages: {sum(1 for c in changed_words if c == 0)} unchanged, "
            f"{sum(1 for c in changed_words if 0 < c <= 4)} with 1-4 words changed, "
            f"{sum(1 for c in changed_words if c > 4)} with more; median {changed_words[len(changed_words) // 2]} words")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pid", type=int)
    parser.add_argument("--diff", action="store_true", help="how the first instance's copied pages differ")
    args = parser.parse_args()
    found = mappings(args.pid)
    if not found:
        raise SystemExit("no Wasm memory images mapped in that process")
    print("| instance | image MiB | image pages resident | copied pages (MiB) | own pages past the image (MiB) |")
    print("|---|---|---|---|---|")
    first_pages = None
    with open(f"/proc/{args.pid}/pagemap", "rb") as pagemap:
        for number, (start, end, _, _, after) in enumerate(found):
            pages = entries(pagemap, start, end)
            if number == 0:
                first_pages = pages
            resident = sum(1 for e in pages if e & PRESENT)
            copied = sum(1 for e in pages if e & PRESENT and not e & FILE_OR_SHARED)
            grown = past_image_pages(pagemap, after)
            print(f"| {number} | {(end - start) / 2**20:.0f} | {resident} | {copied} ({copied * PAGE / 2**20:.2f}) | "
                  f"{grown} ({grown * PAGE / 2**20:.2f}) |")
    if args.diff:
        start, _, offset, name, _ = found[0]
        print(f"\ninstance 0: {describe_copies(args.pid, first_pages, start, offset, name)}")


if __name__ == "__main__":
    main()
