//! What pmemvm's guests need of a kernel configuration, option by option.

/// One option a guest needs and what breaks without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    /// The option, e.g. `CONFIG_ACPI_NFIT`.
    pub option: &'static str,
    /// What does not work without it.
    pub breaks: &'static str,
    /// The module that provides it when it is `=m`, if `--modules` packs that one
    /// ([`crate::guest::modules::WANTED`]); `None`: it must be built in.
    pub module: Option<&'static str>,
}

const fn req(option: &'static str, breaks: &'static str) -> Requirement {
    Requirement {
        option,
        breaks,
        module: None,
    }
}

/// A requirement that may be a module: `--modules` packs `module` and the guest loads it.
const fn reqm(option: &'static str, module: &'static str, breaks: &'static str) -> Requirement {
    Requirement {
        option,
        breaks,
        module: Some(module),
    }
}

/// Everything pmemvm's guest image, its init and its experiments use, grouped
/// as the fragment prints it.
pub const REQUIREMENTS: &[(&str, &[Requirement])] = &[
    (
        "boot under pmemvm",
        &[
            req("CONFIG_64BIT", "pmemvm boots 64-bit x86 kernels only"),
            req(
                "CONFIG_PVH",
                "an ELF vmlinux does not boot (no PVH entry note); a bzImage still does",
            ),
            req(
                "CONFIG_ACPI",
                "no ACPI: no NVDIMMs (NFIT), no power-off, no CPUs beyond the first",
            ),
            req("CONFIG_SMP", "only one vCPU comes up"),
            req(
                "CONFIG_SERIAL_8250",
                "no console and no result channel (COM1/COM2 are 16550 UARTs)",
            ),
            req(
                "CONFIG_SERIAL_8250_CONSOLE",
                "no kernel messages on the console (console=ttyS0)",
            ),
            req(
                "CONFIG_BLK_DEV_INITRD",
                "the initramfs (and the job appended to it) is not loaded",
            ),
            req(
                "CONFIG_RD_GZIP",
                "the guest image's gzip initramfs cannot be unpacked",
            ),
            req("CONFIG_DEVTMPFS", "no /dev nodes for the init"),
            req("CONFIG_BINFMT_ELF", "no user space"),
            req(
                "CONFIG_BINFMT_SCRIPT",
                "the shell-script /init does not run",
            ),
            req("CONFIG_PROC_FS", "the init and ndctl cannot read /proc"),
            req(
                "CONFIG_SYSFS",
                "ndctl/daxctl see no devices (they work through sysfs)",
            ),
            req("CONFIG_TMPFS", "no /tmp for the job's results"),
            req(
                "CONFIG_DEVPORT",
                "the guest-exit port 0x501 cannot be written (/dev/port): no job status",
            ),
        ],
    ),
    (
        "NVDIMMs",
        &[
            reqm(
                "CONFIG_ACPI_NFIT",
                "nfit",
                "the NFIT is ignored: no NVDIMM regions, no /dev/pmem*",
            ),
            reqm(
                "CONFIG_LIBNVDIMM",
                "libnvdimm",
                "no NVDIMM subsystem: no regions, namespaces or labels",
            ),
            reqm(
                "CONFIG_BLK_DEV_PMEM",
                "nd_pmem",
                "no /dev/pmem* block devices",
            ),
            req(
                "CONFIG_ZONE_DEVICE",
                "no struct pages for pmem: fsdax and devdax namespaces fail",
            ),
            req(
                "CONFIG_SPARSEMEM_VMEMMAP",
                "ZONE_DEVICE is not available (it depends on it)",
            ),
            req(
                "CONFIG_MEMORY_HOTPLUG",
                "ZONE_DEVICE and system-ram (kmem) are not available",
            ),
            req("CONFIG_NVDIMM_PFN", "ndctl create-namespace -m fsdax fails"),
            req(
                "CONFIG_NVDIMM_DAX",
                "ndctl create-namespace -m devdax fails",
            ),
            req("CONFIG_BTT", "ndctl create-namespace -m sector fails"),
            reqm("CONFIG_DAX", "dax", "no DAX at all"),
            reqm(
                "CONFIG_DEV_DAX",
                "device_dax",
                "no /dev/dax* character devices",
            ),
            reqm(
                "CONFIG_DEV_DAX_PMEM",
                "dax_pmem",
                "devdax namespaces get no /dev/dax*",
            ),
            req("CONFIG_FS_DAX", "mount -o dax is refused by XFS and ext4"),
            req(
                "CONFIG_NUMA",
                "every NVDIMM is in node 0: no target_node, daxctl system-ram adds no node",
            ),
            req(
                "CONFIG_ACPI_NUMA",
                "the SRAT is ignored: NVDIMM proximity domains are lost",
            ),
            reqm(
                "CONFIG_DEV_DAX_KMEM",
                "kmem",
                "daxctl reconfigure-device --mode=system-ram fails",
            ),
        ],
    ),
    (
        "fio and the experiments",
        &[
            req(
                "CONFIG_IO_URING",
                "fio's io_uring engine fails (every experiment uses it)",
            ),
            req("CONFIG_AIO", "fio's libaio engine fails"),
            req(
                "CONFIG_SYSVIPC",
                "fio cannot start jobs (it uses SysV shared memory)",
            ),
            req("CONFIG_FUTEX", "fio and threaded programs fail"),
            req("CONFIG_EPOLL", "io_uring and many programs fail"),
            req("CONFIG_EVENTFD", "io_uring completion notification fails"),
            req("CONFIG_POSIX_TIMERS", "fio's time-based runs fail"),
            req("CONFIG_SHMEM", "no shared memory for fio"),
            req("CONFIG_FILE_LOCKING", "fio's file locking fails"),
            reqm(
                "CONFIG_XFS_FS",
                "xfs",
                "the XFS-DAX experiment cannot make or mount XFS",
            ),
            reqm(
                "CONFIG_EXT4_FS",
                "ext4",
                "mkfs.ext4 /dev/pmem0 && mount -o dax fails",
            ),
            reqm(
                "CONFIG_BLK_DEV_NULL_BLK",
                "null_blk",
                "the bcache experiments get no null_blk devices",
            ),
            reqm(
                "CONFIG_BCACHE",
                "bcache",
                "the bcache experiments get no /dev/bcache0",
            ),
        ],
    ),
];

/// What a kernel with modules needs besides: when the first option is `=m`, the
/// requirement must be met (`=y`) too.
pub const MODULE_NEEDS: &[(&str, Requirement)] = &[(
    "CONFIG_ND_BTT",
    req(
        "CONFIG_DEBUG_FS",
        "nd_btt.ko does not load (6.1's btt init fails with ENXIO without debugfs), nor \
         nd_pmem.ko, which needs it: no /dev/pmem*",
    ),
)];
