//! The pod sandbox ("pause") program of Capstan's own sandbox image.
//!
//! Every pod's sandbox container runs this program: it holds the pod's namespaces open and, as
//! PID 1 of a pod that shares its process namespace, reaps the orphans reparented to it. It does
//! what upstream's `pause.c` does:
//!
//! - SIGINT and SIGTERM make it exit with status 0;
//! - SIGCHLD has a handler that does nothing (the default disposition would never wake it);
//! - it then loops forever: `wait4(-1, NULL, 0, NULL)` reaps any child (blocking while children
//!   exist); once none is left (`ECHILD`) it sleeps in `rt_sigsuspend` until a signal arrives.
//!
//! SIGCHLD stays blocked outside `rt_sigsuspend`, so a child that dies between the failed `wait4`
//! and the sleep leaves the signal pending and the sleep returns at once: no zombie waits for the
//! next signal.
//!
//! It is a freestanding static executable (no libc, no std, under 2 KB) that talks to Linux
//! through raw system calls in inline assembly, for x86_64 and aarch64. The build script of
//! `capstan-kubelet` compiles this file on its own with `rustc` (it is not a module of the crate),
//! and the crate embeds the result; the workspace's `unsafe_code = "forbid"` lint applies to the
//! crates, not to this program, which cannot be written without `unsafe`.

#![no_std]
#![no_main]

use core::arch::{asm, naked_asm};
use core::panic::PanicInfo;

#[cfg(not(target_os = "linux"))]
compile_error!("the pause program runs on Linux only");

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "the pause program supports x86_64 and aarch64 only: add this architecture's system call \
     numbers and entry code to pause/pause.rs"
);

/// System call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
#[cfg(target_arch = "x86_64")]
mod nr {
    pub const RT_SIGACTION: usize = 13;
    pub const RT_SIGPROCMASK: usize = 14;
    pub const RT_SIGRETURN: usize = 15;
    pub const WAIT4: usize = 61;
    pub const RT_SIGSUSPEND: usize = 130;
    pub const EXIT_GROUP: usize = 231;
}

/// System call numbers (include/uapi/asm-generic/unistd.h).
#[cfg(target_arch = "aarch64")]
mod nr {
    pub const EXIT_GROUP: usize = 94;
    pub const RT_SIGSUSPEND: usize = 133;
    pub const RT_SIGACTION: usize = 134;
    pub const RT_SIGPROCMASK: usize = 135;
    pub const RT_SIGRETURN: usize = 139;
    pub const WAIT4: usize = 260;
}

const SIGINT: usize = 2;
const SIGTERM: usize = 15;
const SIGCHLD: usize = 17;

const SA_NOCLDSTOP: u64 = 0x1;
const SA_RESTORER: u64 = 0x0400_0000;
const SIG_BLOCK: usize = 0;

/// The kernel's `struct sigaction` (not libc's), the same on x86_64 and aarch64.
#[repr(C)]
struct SigAction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// The size of the kernel's signal set, as `rt_sig*` calls want it.
const SIGSET_SIZE: usize = 8;

#[cfg(target_arch = "x86_64")]
unsafe fn syscall4(n: usize, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller passes a valid system call and arguments; `syscall` clobbers rcx, r11.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a1,
            in("rsi") a2,
            in("rdx") a3,
            in("r10") a4,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
unsafe fn syscall4(n: usize, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller passes a valid system call and arguments.
    unsafe {
        asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a1 as isize => ret,
            in("x1") a2,
            in("x2") a3,
            in("x3") a4,
            options(nostack),
        );
    }
    ret
}

fn exit(code: usize) -> ! {
    // SAFETY: exit_group takes a status and does not return.
    unsafe {
        syscall4(nr::EXIT_GROUP, code, 0, 0, 0);
    }
    loop {}
}

/// Returns to the interrupted code after a handler: the kernel jumps here when a handler returns.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
extern "C" fn restorer() -> ! {
    naked_asm!("mov eax, {nr}", "syscall", "ud2", nr = const nr::RT_SIGRETURN)
}

#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
extern "C" fn restorer() -> ! {
    naked_asm!("mov x8, {nr}", "svc 0", "udf #0", nr = const nr::RT_SIGRETURN)
}

extern "C" fn on_stop(_signal: i32) {
    exit(0);
}

extern "C" fn on_child(_signal: i32) {}

fn handle(signal: usize, handler: extern "C" fn(i32), flags: u64) {
    let action = SigAction {
        handler: handler as *const () as usize,
        flags: flags | SA_RESTORER,
        restorer: restorer as *const () as usize,
        mask: 0,
    };
    // SAFETY: `action` is a valid kernel sigaction that outlives the call.
    let ret = unsafe {
        syscall4(
            nr::RT_SIGACTION,
            signal,
            &raw const action as usize,
            0,
            SIGSET_SIZE,
        )
    };
    if ret < 0 {
        exit(1);
    }
}

fn main() -> ! {
    handle(SIGINT, on_stop, 0);
    handle(SIGTERM, on_stop, 0);
    handle(SIGCHLD, on_child, SA_NOCLDSTOP);
    let chld: u64 = 1 << (SIGCHLD - 1);
    let empty: u64 = 0;
    // SAFETY: valid signal sets that outlive the calls; null pointers where the kernel allows.
    unsafe {
        if syscall4(
            nr::RT_SIGPROCMASK,
            SIG_BLOCK,
            &raw const chld as usize,
            0,
            SIGSET_SIZE,
        ) < 0
        {
            exit(1);
        }
        loop {
            if syscall4(nr::WAIT4, usize::MAX, 0, 0, 0) < 0 {
                // No child left (or interrupted): sleep until a signal arrives.
                syscall4(
                    nr::RT_SIGSUSPEND,
                    &raw const empty as usize,
                    SIGSET_SIZE,
                    0,
                    0,
                );
            }
        }
    }
}

/// The entry point: the kernel leaves the stack 16-byte aligned with no return address; make a
/// regular call so `main` sees the alignment the C ABI promises.
#[cfg(target_arch = "x86_64")]
#[unsafe(no_mangle)]
#[unsafe(naked)]
extern "C" fn _start() -> ! {
    naked_asm!("xor ebp, ebp", "and rsp, -16", "call {main}", "ud2", main = sym main)
}

#[cfg(target_arch = "aarch64")]
#[unsafe(no_mangle)]
#[unsafe(naked)]
extern "C" fn _start() -> ! {
    naked_asm!("mov x29, xzr", "mov x30, xzr", "bl {main}", "udf #0", main = sym main)
}

#[panic_handler]
fn panic(_info: &PanicInfo) -> ! {
    exit(2)
}
