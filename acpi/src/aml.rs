//! A small AML (ACPI Machine Language) encoder.
//!
//! Only the handful of ASL constructs pmemvm's DSDT and NVDIMM SSDT use are
//! covered. Every function returns the encoded bytes of one term so terms can
//! be nested like the ASL they stand for. The encodings follow ACPI 6.5,
//! chapter 20 ("ACPI Machine Language Specification").

/// `ZeroOp`.
const ZERO_OP: u8 = 0x00;
/// `OneOp`.
const ONE_OP: u8 = 0x01;
/// `OnesOp`.
const ONES_OP: u8 = 0xff;
const NAME_OP: u8 = 0x08;
const BYTE_PREFIX: u8 = 0x0a;
const WORD_PREFIX: u8 = 0x0b;
const DWORD_PREFIX: u8 = 0x0c;
const STRING_PREFIX: u8 = 0x0d;
const QWORD_PREFIX: u8 = 0x0e;
const SCOPE_OP: u8 = 0x10;
const BUFFER_OP: u8 = 0x11;
const PACKAGE_OP: u8 = 0x12;
const METHOD_OP: u8 = 0x14;
const DUAL_NAME_PREFIX: u8 = 0x2e;
const MULTI_NAME_PREFIX: u8 = 0x2f;
const EXT_OP_PREFIX: u8 = 0x5b;
const ROOT_CHAR: u8 = b'\\';
const PARENT_PREFIX_CHAR: u8 = b'^';
const LOCAL0_OP: u8 = 0x60;
const ARG0_OP: u8 = 0x68;
const STORE_OP: u8 = 0x70;
const AND_OP: u8 = 0x7b;
const OR_OP: u8 = 0x7d;
const CREATE_DWORD_FIELD_OP: u8 = 0x8a;
const LOR_OP: u8 = 0x91;
const DEREF_OF_OP: u8 = 0x83;
const SIZE_OF_OP: u8 = 0x87;
const INDEX_OP: u8 = 0x88;
const OBJECT_TYPE_OP: u8 = 0x8e;
const NOTIFY_OP: u8 = 0x86;
const LAND_OP: u8 = 0x90;
const LNOT_OP: u8 = 0x92;
const LEQUAL_OP: u8 = 0x93;
const LGREATER_OP: u8 = 0x94;
const LLESS_OP: u8 = 0x95;
const MID_OP: u8 = 0x9e;
const IF_OP: u8 = 0xa0;
const ELSE_OP: u8 = 0xa1;
const RETURN_OP: u8 = 0xa4;
const WHILE_OP: u8 = 0xa2;
const BREAK_OP: u8 = 0xa5;
const ADD_OP: u8 = 0x72;
const CONCAT_OP: u8 = 0x73;
const SUBTRACT_OP: u8 = 0x74;
const TO_BUFFER_OP: u8 = 0x96;
/// Second byte of `OpRegionOp` (after `EXT_OP_PREFIX`).
const OP_REGION_OP: u8 = 0x80;
/// Second byte of `FieldOp`.
const FIELD_OP: u8 = 0x81;
/// Second byte of `DeviceOp`.
const DEVICE_OP: u8 = 0x82;

/// Operation region address spaces (ACPI 6.5 §19.6.100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RegionSpace {
    /// `SystemMemory`.
    SystemMemory = 0,
    /// `SystemIO`.
    SystemIo = 1,
}

/// Field access types (`FieldFlags` bits 0-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FieldAccess {
    /// `AnyAcc`.
    Any = 0,
    /// `ByteAcc`.
    Byte = 1,
    /// `WordAcc`.
    Word = 2,
    /// `DWordAcc`.
    DWord = 3,
}

/// Encodes a `PkgLength` for a package whose contents (after the
/// `PkgLength` itself) are `content_len` bytes long. The encoded value
/// includes the `PkgLength` bytes.
fn pkg_length(content_len: usize) -> Vec<u8> {
    if content_len + 1 < 1 << 6 {
        return encode_pkg_value(content_len + 1, 1);
    }
    if content_len + 2 < 1 << 12 {
        return encode_pkg_value(content_len + 2, 2);
    }
    if content_len + 3 < 1 << 20 {
        return encode_pkg_value(content_len + 3, 3);
    }
    encode_pkg_value(content_len + 4, 4)
}

/// Encodes `value` as a `PkgLength` of exactly `nbytes` bytes (1..=4).
#[allow(clippy::cast_possible_truncation)] // every byte is masked first
fn encode_pkg_value(value: usize, nbytes: usize) -> Vec<u8> {
    if nbytes == 1 {
        return vec![(value & 0x3f) as u8];
    }
    let mut out = vec![(((nbytes - 1) << 6) | (value & 0x0f)) as u8];
    for i in 0..nbytes - 1 {
        out.push(((value >> (4 + 8 * i)) & 0xff) as u8);
    }
    out
}

/// Wraps `contents` in a `PkgLength` (the bytes after an opcode).
fn with_pkg_length(op: &[u8], contents: &[u8]) -> Vec<u8> {
    let mut out = op.to_vec();
    out.extend(pkg_length(contents.len()));
    out.extend_from_slice(contents);
    out
}

fn concat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.iter().flatten().copied().collect()
}

/// Pads one path segment to a 4-character `NameSeg` with `_`.
fn name_seg(seg: &str) -> [u8; 4] {
    let mut out = [b'_'; 4];
    for (dst, src) in out.iter_mut().zip(seg.bytes()) {
        *dst = src;
    }
    out
}

/// Encodes a `NameString` such as `\_SB.NVDR`, `^FOO` or `NV00`.
///
/// Segments shorter than four characters are padded with `_`, as iasl does.
/// The caller passes valid ASL names (upper-case letters, digits, `_`; at
/// most four characters per segment); the names are all pmemvm's own.
pub fn name_string(path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = path;
    if let Some(r) = rest.strip_prefix('\\') {
        out.push(ROOT_CHAR);
        rest = r;
    }
    while let Some(r) = rest.strip_prefix('^') {
        out.push(PARENT_PREFIX_CHAR);
        rest = r;
    }
    let segs: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split('.').collect()
    };
    match segs.len() {
        0 => out.push(ZERO_OP), // NullName
        1 => {}
        2 => out.push(DUAL_NAME_PREFIX),
        n => {
            out.push(MULTI_NAME_PREFIX);
            out.push(u8::try_from(n).unwrap_or(u8::MAX));
        }
    }
    for seg in segs {
        out.extend_from_slice(&name_seg(seg));
    }
    out
}

/// An integer constant in its shortest encoding (`Zero`, `One`, `Ones`,
/// `BytePrefix`, `WordPrefix`, `DWordPrefix` or `QWordPrefix`).
pub fn integer(value: u64) -> Vec<u8> {
    match value {
        0 => vec![ZERO_OP],
        1 => vec![ONE_OP],
        u64::MAX => vec![ONES_OP],
        v if v <= 0xff => vec![BYTE_PREFIX, v.to_le_bytes()[0]],
        v if v <= 0xffff => concat(&[vec![WORD_PREFIX], v.to_le_bytes()[..2].to_vec()]),
        v if v <= 0xffff_ffff => concat(&[vec![DWORD_PREFIX], v.to_le_bytes()[..4].to_vec()]),
        v => concat(&[vec![QWORD_PREFIX], v.to_le_bytes().to_vec()]),
    }
}

/// A string constant (ASCII, NUL-terminated).
pub fn string(s: &str) -> Vec<u8> {
    let mut out = vec![STRING_PREFIX];
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    out
}

/// `Buffer (n) { bytes }`.
pub fn buffer(bytes: &[u8]) -> Vec<u8> {
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    let contents = concat(&[integer(len), bytes.to_vec()]);
    with_pkg_length(&[BUFFER_OP], &contents)
}

/// `Package (n) { elements }` (at most 255 elements).
pub fn package(elements: &[Vec<u8>]) -> Vec<u8> {
    let mut contents = vec![u8::try_from(elements.len()).unwrap_or(u8::MAX)];
    contents.extend(concat(elements));
    with_pkg_length(&[PACKAGE_OP], &contents)
}

/// `Package (n) {}`: `n` uninitialized elements, filled with `Store (x, Index (pkg, i))`.
pub fn empty_package(n: u8) -> Vec<u8> {
    with_pkg_length(&[PACKAGE_OP], &[n])
}

/// `Name (path, value)`.
pub fn name(path: &str, value: &[u8]) -> Vec<u8> {
    concat(&[vec![NAME_OP], name_string(path), value.to_vec()])
}

/// `Scope (path) { body }`.
pub fn scope(path: &str, body: &[Vec<u8>]) -> Vec<u8> {
    with_pkg_length(&[SCOPE_OP], &concat(&[name_string(path), concat(body)]))
}

/// `Device (path) { body }`.
pub fn device(path: &str, body: &[Vec<u8>]) -> Vec<u8> {
    with_pkg_length(
        &[EXT_OP_PREFIX, DEVICE_OP],
        &concat(&[name_string(path), concat(body)]),
    )
}

/// `Method (path, args, NotSerialized|Serialized) { body }` (sync level 0).
pub fn method(path: &str, args: u8, serialized: bool, body: &[Vec<u8>]) -> Vec<u8> {
    let flags = (args & 0x7) | if serialized { 0x08 } else { 0 };
    with_pkg_length(
        &[METHOD_OP],
        &concat(&[name_string(path), vec![flags], concat(body)]),
    )
}

/// `OperationRegion (name, space, offset, length)`.
pub fn op_region(path: &str, space: RegionSpace, offset: u64, length: u64) -> Vec<u8> {
    concat(&[
        vec![EXT_OP_PREFIX, OP_REGION_OP],
        name_string(path),
        vec![space as u8],
        integer(offset),
        integer(length),
    ])
}

/// `Field (region, access, NoLock, Preserve) { name, bits, ... }`.
///
/// An entry with an empty name is an unnamed (reserved) field, `, bits`.
pub fn field(region: &str, access: FieldAccess, entries: &[(&str, usize)]) -> Vec<u8> {
    // Flags: access type in bits 0-3, NoLock (bit 4 clear), Preserve (bits 5-6 clear).
    let mut contents = name_string(region);
    contents.push(access as u8);
    for (name, bits) in entries {
        if name.is_empty() {
            contents.push(0x00); // ReservedField
        } else {
            contents.extend_from_slice(&name_seg(name));
        }
        // A field's bit length is a PkgLength that does not count itself.
        let n = if *bits < 1 << 6 {
            1
        } else if *bits < 1 << 12 {
            2
        } else if *bits < 1 << 20 {
            3
        } else {
            4
        };
        contents.extend(encode_pkg_value(*bits, n));
    }
    with_pkg_length(&[EXT_OP_PREFIX, FIELD_OP], &contents)
}

/// `Notify (object, value)`.
pub fn notify(object: &str, value: u64) -> Vec<u8> {
    concat(&[vec![NOTIFY_OP], name_string(object), integer(value)])
}

/// `Return (value)`.
pub fn ret(value: &[u8]) -> Vec<u8> {
    concat(&[vec![RETURN_OP], value.to_vec()])
}

/// `If (predicate) { body }`.
pub fn if_(predicate: &[u8], body: &[Vec<u8>]) -> Vec<u8> {
    with_pkg_length(&[IF_OP], &concat(&[predicate.to_vec(), concat(body)]))
}

/// `While (predicate) { body }`.
pub fn while_(predicate: &[u8], body: &[Vec<u8>]) -> Vec<u8> {
    with_pkg_length(&[WHILE_OP], &concat(&[predicate.to_vec(), concat(body)]))
}

/// `Break`: leaves the innermost `While`.
pub fn break_() -> Vec<u8> {
    vec![BREAK_OP]
}

/// `Add (a, b, target)`.
pub fn add(a: &[u8], b: &[u8], target: &[u8]) -> Vec<u8> {
    concat(&[vec![ADD_OP], a.to_vec(), b.to_vec(), target.to_vec()])
}

/// `Subtract (a, b, target)`.
pub fn subtract(a: &[u8], b: &[u8], target: &[u8]) -> Vec<u8> {
    concat(&[vec![SUBTRACT_OP], a.to_vec(), b.to_vec(), target.to_vec()])
}

/// `Concatenate (a, b, target)`.
pub fn concatenate(a: &[u8], b: &[u8], target: &[u8]) -> Vec<u8> {
    concat(&[vec![CONCAT_OP], a.to_vec(), b.to_vec(), target.to_vec()])
}

/// `ToBuffer (operand)` without a target (an Integer becomes its 8 bytes, little-endian).
pub fn to_buffer(operand: &[u8]) -> Vec<u8> {
    concat(&[vec![TO_BUFFER_OP], operand.to_vec(), vec![ZERO_OP]])
}

/// `Else { body }` (must directly follow an `If`).
pub fn else_(body: &[Vec<u8>]) -> Vec<u8> {
    with_pkg_length(&[ELSE_OP], &concat(body))
}

/// `And (a, b)` (bitwise; the result is not stored anywhere).
pub fn and(a: &[u8], b: &[u8]) -> Vec<u8> {
    concat(&[vec![AND_OP], a.to_vec(), b.to_vec(), vec![ZERO_OP]])
}

/// `And (a, b, target)`: the bitwise and of `a` and `b`, stored in `target`.
pub fn and_into(a: &[u8], b: &[u8], target: &[u8]) -> Vec<u8> {
    concat(&[vec![AND_OP], a.to_vec(), b.to_vec(), target.to_vec()])
}

/// `Or (a, b, target)`: the bitwise or of `a` and `b`, stored in `target`.
pub fn or_into(a: &[u8], b: &[u8], target: &[u8]) -> Vec<u8> {
    concat(&[vec![OR_OP], a.to_vec(), b.to_vec(), target.to_vec()])
}

/// `LOr (a, b)`.
pub fn lor(a: &[u8], b: &[u8]) -> Vec<u8> {
    concat(&[vec![LOR_OP], a.to_vec(), b.to_vec()])
}

/// `CreateDWordField (source, byte_index, name)`: `name` is the 32 bits of
/// the buffer `source` at `byte_index`.
pub fn create_dword_field(source: &[u8], byte_index: u64, name: &str) -> Vec<u8> {
    concat(&[
        vec![CREATE_DWORD_FIELD_OP],
        source.to_vec(),
        integer(byte_index),
        name_string(name),
    ])
}

/// `LEqual (a, b)`.
pub fn lequal(a: &[u8], b: &[u8]) -> Vec<u8> {
    concat(&[vec![LEQUAL_OP], a.to_vec(), b.to_vec()])
}

/// `LGreater (a, b)`.
pub fn lgreater(a: &[u8], b: &[u8]) -> Vec<u8> {
    concat(&[vec![LGREATER_OP], a.to_vec(), b.to_vec()])
}

/// `LLess (a, b)`.
pub fn lless(a: &[u8], b: &[u8]) -> Vec<u8> {
    concat(&[vec![LLESS_OP], a.to_vec(), b.to_vec()])
}

/// `LAnd (a, b)` (both operands are always evaluated).
pub fn land(a: &[u8], b: &[u8]) -> Vec<u8> {
    concat(&[vec![LAND_OP], a.to_vec(), b.to_vec()])
}

/// `LNot (a)`.
pub fn lnot(a: &[u8]) -> Vec<u8> {
    concat(&[vec![LNOT_OP], a.to_vec()])
}

/// `Store (source, destination)`.
pub fn store(source: &[u8], destination: &[u8]) -> Vec<u8> {
    concat(&[vec![STORE_OP], source.to_vec(), destination.to_vec()])
}

/// `SizeOf (object)`.
pub fn size_of(object: &[u8]) -> Vec<u8> {
    concat(&[vec![SIZE_OF_OP], object.to_vec()])
}

/// `ObjectType (object)`.
pub fn object_type(object: &[u8]) -> Vec<u8> {
    concat(&[vec![OBJECT_TYPE_OP], object.to_vec()])
}

/// `DerefOf (reference)`.
pub fn deref_of(reference: &[u8]) -> Vec<u8> {
    concat(&[vec![DEREF_OF_OP], reference.to_vec()])
}

/// `Index (source, index)` without a target.
pub fn index(source: &[u8], idx: &[u8]) -> Vec<u8> {
    concat(&[vec![INDEX_OP], source.to_vec(), idx.to_vec(), vec![ZERO_OP]])
}

/// `Mid (source, index, length)` without a target.
pub fn mid(source: &[u8], idx: &[u8], length: &[u8]) -> Vec<u8> {
    concat(&[
        vec![MID_OP],
        source.to_vec(),
        idx.to_vec(),
        length.to_vec(),
        vec![ZERO_OP],
    ])
}

/// `LocalN` (0..=7).
pub fn local(n: u8) -> Vec<u8> {
    vec![LOCAL0_OP + (n & 7)]
}

/// `ArgN` (0..=6).
pub fn arg(n: u8) -> Vec<u8> {
    vec![ARG0_OP + n.min(6)]
}

/// A method invocation `path (args...)`.
pub fn call(path: &str, args: &[Vec<u8>]) -> Vec<u8> {
    concat(&[name_string(path), concat(args)])
}

/// A reference to a named object (a bare `NameString`).
pub fn path(path: &str) -> Vec<u8> {
    name_string(path)
}

/// Compresses a 7-character EISA id such as `PNP0501` into the integer
/// `EisaId ("PNP0501")` stands for. Returns `None` for a malformed id.
pub fn eisa_id(id: &str) -> Option<u32> {
    let b = id.as_bytes();
    if b.len() != 7 || !b[..3].iter().all(u8::is_ascii_uppercase) {
        return None;
    }
    let hex = u32::from_str_radix(&id[3..], 16).ok()?;
    let c = |i: usize| u32::from(b[i] - b'@') & 0x1f;
    let vendor = (c(0) << 10) | (c(1) << 5) | c(2);
    // The id is stored big-endian: vendor (2 bytes) then product (2 bytes).
    let be = (vendor << 16) | hex;
    Some(be.swap_bytes())
}

/// The 16 bytes `ToUUID ("...")` produces for a textual UUID (the first
/// three groups little-endian, the last two in string order). Returns `None`
/// for a malformed UUID.
pub fn uuid(text: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = text.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    if groups.len() != 5 || groups.iter().zip(lens).any(|(g, l)| g.len() != l) {
        return None;
    }
    let hex: String = groups.concat();
    let mut raw = [0u8; 16];
    for (i, byte) in raw.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    let mut out = raw;
    out[0..4].copy_from_slice(&[raw[3], raw[2], raw[1], raw[0]]);
    out[4..6].copy_from_slice(&[raw[5], raw[4]]);
    out[6..8].copy_from_slice(&[raw[7], raw[6]]);
    Some(out)
}

/// Small resource-template descriptors for `_CRS`.
pub mod resource {
    /// `IO (Decode16, base, base, 1, len)`: a fixed 16-bit-decoded I/O range.
    pub fn io16(base: u16, len: u8) -> Vec<u8> {
        let b = base.to_le_bytes();
        vec![0x47, 0x01, b[0], b[1], b[0], b[1], 0x01, len]
    }

    /// `IRQNoFlags () { irq }` (edge triggered, active high, exclusive).
    pub fn irq_no_flags(irq: u8) -> Vec<u8> {
        let mask = (1u16 << (irq & 0xf)).to_le_bytes();
        vec![0x22, mask[0], mask[1]]
    }

    /// `Interrupt (ResourceConsumer, Edge, ActiveHigh, Exclusive) { gsi }`:
    /// the extended interrupt descriptor, for a GSI past the ISA lines.
    pub fn interrupt_edge_high(gsi: u32) -> Vec<u8> {
        // Type 0x89, length 6; flags: consumer (bit 0), edge (bit 1); one
        // interrupt.
        let mut v = vec![0x89, 0x06, 0x00, 0x03, 0x01];
        v.extend_from_slice(&gsi.to_le_bytes());
        v
    }

    /// `Memory32Fixed (ReadWrite, base, len)`: a fixed 32-bit memory range.
    pub fn memory32_fixed(base: u32, len: u32) -> Vec<u8> {
        let mut v = vec![0x86, 0x09, 0x00, 0x01];
        v.extend_from_slice(&base.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
        v
    }

    /// `ResourceTemplate () { descriptors }` as a buffer with its end tag.
    pub fn template(descriptors: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes: Vec<u8> = descriptors.iter().flatten().copied().collect();
        bytes.extend_from_slice(&[0x79, 0x00]);
        super::buffer(&bytes)
    }
}

#[cfg(test)]
#[path = "aml_tests.rs"]
mod tests;
