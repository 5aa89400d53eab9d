//! The NAND timing model: per-chip and per-channel busy times computed in virtual time, so a
//! run is deterministic; presets for "no delay" and the paper's flash card.

use std::fmt;
use std::str::FromStr;

use crate::geometry::Geometry;

/// Latencies of one NAND chip and its channel, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NandTiming {
    /// Array read: cell to page register (chip busy).
    pub read_ns: u64,
    /// Program: page register to cells (chip busy).
    pub program_ns: u64,
    /// Block erase (chip busy).
    pub erase_ns: u64,
    /// Moving one 8 KiB page over the channel (channel and chip busy).
    pub transfer_ns: u64,
}

impl NandTiming {
    /// The paper's card (8 channels x 8 ways): 8 KiB over a channel in 53.3 us gives 150K
    /// random reads/s and 1.2 GB/s on 8 channels; a 1.11 ms program on 64 chips gives about
    /// 55K writes/s (450 MB/s).
    pub const PAPER_CARD: NandTiming = NandTiming {
        read_ns: 60_000,
        program_ns: 1_110_000,
        erase_ns: 3_000_000,
        transfer_ns: 53_333,
    };
}

/// Which timing the device applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimingModel {
    /// No delay: commands complete as fast as the backend does (tests, raw backend speed).
    #[default]
    None,
    /// The paper's card, [`NandTiming::PAPER_CARD`].
    PaperCard,
    /// Custom latencies.
    Custom(NandTiming),
}

impl TimingModel {
    /// The latencies in force, if any.
    pub fn nand(&self) -> Option<NandTiming> {
        match self {
            TimingModel::None => None,
            TimingModel::PaperCard => Some(NandTiming::PAPER_CARD),
            TimingModel::Custom(t) => Some(*t),
        }
    }
}

impl fmt::Display for TimingModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimingModel::None => f.write_str("none"),
            TimingModel::PaperCard => f.write_str("paper-card"),
            TimingModel::Custom(t) => write!(
                f,
                "custom:{},{},{},{}",
                t.read_ns, t.program_ns, t.erase_ns, t.transfer_ns
            ),
        }
    }
}

impl FromStr for TimingModel {
    type Err = String;
    /// `none`, `paper-card`, or `custom:READ_NS,PROGRAM_NS,ERASE_NS,TRANSFER_NS`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(TimingModel::None),
            "paper-card" => Ok(TimingModel::PaperCard),
            _ => {
                let Some(rest) = s.strip_prefix("custom:") else {
                    return Err(format!(
                        "unknown timing `{s}`: use none, paper-card or \
                         custom:READ_NS,PROGRAM_NS,ERASE_NS,TRANSFER_NS"
                    ));
                };
                let v: Vec<u64> = rest
                    .split(',')
                    .map(|x| x.trim().parse::<u64>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("bad custom timing `{rest}`: {e}"))?;
                match v.as_slice() {
                    [r, p, e, t] => Ok(TimingModel::Custom(NandTiming {
                        read_ns: *r,
                        program_ns: *p,
                        erase_ns: *e,
                        transfer_ns: *t,
                    })),
                    _ => Err(format!("custom timing needs 4 numbers, got `{rest}`")),
                }
            }
        }
    }
}

/// When completions are handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Release {
    /// As soon as the backend is done; time is only accounted (virtual clock). Deterministic.
    #[default]
    Virtual,
    /// Not before the model's completion time has passed on the wall clock (benchmarks).
    WallClock,
}

/// Event scheduler for the flash array: when each chip and channel is next free.
#[derive(Debug, Clone)]
pub(crate) struct NandScheduler {
    timing: NandTiming,
    channels: u32,
    chip_free: Vec<u64>,
    channel_free: Vec<u64>,
}

impl NandScheduler {
    pub(crate) fn new(timing: NandTiming, geometry: &Geometry) -> Self {
        NandScheduler {
            timing,
            channels: geometry.channels,
            chip_free: vec![0; geometry.chips() as usize],
            channel_free: vec![0; geometry.channels as usize],
        }
    }

    fn channel(&self, chip: u32) -> usize {
        (chip % self.channels) as usize
    }

    /// A page read issued at `start` on `chip`; returns its completion time.
    /// The chip senses the page, then holds it in its register until the channel moves it out.
    pub(crate) fn read(&mut self, start: u64, chip: u32) -> u64 {
        let ch = self.channel(chip);
        let c = chip as usize;
        let sensed = start.max(self.chip_free[c]) + self.timing.read_ns;
        let done = sensed.max(self.channel_free[ch]) + self.timing.transfer_ns;
        self.channel_free[ch] = done;
        self.chip_free[c] = done;
        done
    }

    /// A page program issued at `start` on `chip`: the channel moves the data in, then the
    /// chip programs it.
    pub(crate) fn program(&mut self, start: u64, chip: u32) -> u64 {
        let ch = self.channel(chip);
        let c = chip as usize;
        let moved =
            start.max(self.chip_free[c]).max(self.channel_free[ch]) + self.timing.transfer_ns;
        self.channel_free[ch] = moved;
        let done = moved + self.timing.program_ns;
        self.chip_free[c] = done;
        done
    }

    /// A block erase issued at `start` on `chip`.
    pub(crate) fn erase(&mut self, start: u64, chip: u32) -> u64 {
        let c = chip as usize;
        let done = start.max(self.chip_free[c]) + self.timing.erase_ns;
        self.chip_free[c] = done;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_presets_and_custom() {
        assert_eq!("none".parse::<TimingModel>(), Ok(TimingModel::None));
        assert_eq!(
            "paper-card".parse::<TimingModel>(),
            Ok(TimingModel::PaperCard)
        );
        let c: TimingModel = "custom:1,2,3,4".parse().expect("parse");
        assert_eq!(c.to_string(), "custom:1,2,3,4");
        assert!("custom:1,2".parse::<TimingModel>().is_err());
        assert!("fast".parse::<TimingModel>().is_err());
    }

    #[test]
    fn same_channel_transfers_serialise_and_chips_overlap() {
        let g = Geometry {
            channels: 1,
            ways: 2,
            blocks_per_chip: 2,
            pages_per_block: 1,
            spare_blocks_per_chip: 1,
        };
        let t = NandTiming {
            read_ns: 100,
            program_ns: 1000,
            erase_ns: 5000,
            transfer_ns: 10,
        };
        let mut s = NandScheduler::new(t, &g);
        assert_eq!(s.read(0, 0), 110);
        // Chip 1 senses in parallel, then waits for the channel.
        assert_eq!(s.read(0, 1), 120);
        // Chip 0 again: starts after its register was emptied.
        assert_eq!(s.read(0, 0), 220);
        assert_eq!(s.erase(0, 1), 5120);
    }
}
