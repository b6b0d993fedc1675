//! The text form of a [`CompiledPlan`]: feeds, each device queue with its steps, fetches,
//! then the sub-plan of every call, indented (stable, for tests and debugging).

use std::fmt;

use super::{CompiledPlan, SlotId, Work};

impl fmt::Display for CompiledPlan {
    /// Prints feeds, then each queue with its steps (`s3, s4 = SaveV2 "name"(s0, s1) after
    /// #2`), then fetches, then the sub-plan of every call, indented: a stable text form for
    /// tests and debugging.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_indented(f, "")
    }
}

impl CompiledPlan {
    /// Writes the text form with every line prefixed by `indent`.
    fn write_indented(&self, f: &mut fmt::Formatter<'_>, indent: &str) -> fmt::Result {
        let slots = |slots: &[SlotId]| {
            slots
                .iter()
                .map(|slot| format!("s{}", slot.0))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for feed in &self.feeds {
            writeln!(f, "{indent}feed s{} = {}", feed.slot.0, feed.name)?;
        }
        for queue in &self.queues {
            writeln!(f, "{indent}queue {}", queue.device)?;
            for &id in &queue.steps {
                let step = self.step(id);
                write!(f, "{indent}  #{} ", id.0)?;
                if !step.outputs.is_empty() {
                    write!(f, "{} = ", slots(&step.outputs))?;
                }
                let inputs = slots(&step.inputs);
                write!(f, "{} {:?}({inputs})", step.op.type_name(), step.name)?;
                if !step.deps.is_empty() {
                    let deps: Vec<String> = step.deps.iter().map(|d| format!("#{}", d.0)).collect();
                    write!(f, " after {}", deps.join(", "))?;
                }
                if let Work::Fused(fused) = &step.work {
                    let members: Vec<String> = fused
                        .members()
                        .map(|member| format!("#{}", member.0))
                        .collect();
                    write!(f, " fuses {}", members.join(", "))?;
                }
                writeln!(f)?;
            }
        }
        writeln!(f, "{indent}fetch {}", slots(&self.fetches))?;
        for (index, step) in self.steps.iter().enumerate() {
            if let Work::Call { function, plan } = &step.work {
                writeln!(f, "{indent}call #{index} {function} {{")?;
                plan.write_indented(f, &format!("{indent}  "))?;
                writeln!(f, "{indent}}}")?;
            }
        }
        Ok(())
    }
}
