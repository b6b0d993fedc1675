//! What the machine was doing around a measurement: the load average, and the CPU time split
//! into user and system seconds. On a shared VM the system part (the kernel zeroing fresh
//! pages) moves a lot between identical runs, so the benches print both beside wall times.

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`), or `"unknown"`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Whose CPU time [`cpu_time`] reads.
#[derive(Clone, Copy)]
pub enum Who {
    /// This process, every thread.
    This,
    /// The children this process has waited for.
    Children,
}

/// User and system CPU seconds.
#[derive(Clone, Copy, Default)]
pub struct CpuTime {
    /// Seconds in user code.
    pub user: f64,
    /// Seconds in the kernel on the process's behalf (page faults and zeroing included).
    pub system: f64,
}

impl std::ops::Sub for CpuTime {
    type Output = CpuTime;

    fn sub(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user - earlier.user,
            system: self.system - earlier.system,
        }
    }
}

impl std::fmt::Display for CpuTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "user {:.2} s, system {:.2} s", self.user, self.system)
    }
}

/// The CPU time `who` has used so far (`getrusage`), or zero where it cannot be read.
pub fn cpu_time(who: Who) -> CpuTime {
    let target = match who {
        Who::This => libc::RUSAGE_SELF,
        Who::Children => libc::RUSAGE_CHILDREN,
    };
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`, and `target` is one of the two values
    // `getrusage` accepts.
    let status = unsafe { libc::getrusage(target, usage.as_mut_ptr()) };
    if status != 0 {
        return CpuTime::default();
    }
    // SAFETY: `getrusage` succeeded, so it filled `usage` (and it started zeroed anyway).
    let usage = unsafe { usage.assume_init() };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 * 1e-6;
    CpuTime {
        user: seconds(usage.ru_utime),
        system: seconds(usage.ru_stime),
    }
}
