//! `lightstore`: the drive binary.
//!
//! Today it brings up the drive's flash device: it formats the simulated device under
//! `--data-dir` on first start (or opens it, recovering after an unclean stop), prints what
//! the FTL reports, and closes it cleanly. The RESP server, engine and thread set arrive with
//! the engine and firmware work (see docs/ARCHITECTURE.md).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use hwftl_sim::{AppendDevice, Backend, DeviceConfig, Ftl, Geometry, TimingModel};

/// Default logical capacity of the simulated device (a sparse file: only written pages use
/// disk space).
const DEFAULT_CAPACITY: &str = "8GiB";
/// File name of the simulated device inside the data directory.
const SIM_DEVICE_FILE: &str = "device.img";

#[derive(Parser, Debug)]
#[command(
    name = "lightstore",
    version,
    about = "LightStore network-attached key-value drive"
)]
struct Args {
    /// Directory holding the simulated device.
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
    /// `sim` (a device file in the data directory) or `file:PATH` (a file or raw block device).
    #[arg(long, default_value = "sim")]
    device: String,
    /// Logical capacity when formatting a new device, e.g. 512MiB, 8GiB.
    #[arg(long, default_value = DEFAULT_CAPACITY)]
    capacity: String,
    /// NAND timing model: none, paper-card, or custom:READ,PROGRAM,ERASE,XFER,WXFER (ns).
    #[arg(long, default_value = "none")]
    timing: String,
}

/// Parses sizes like `512MiB`, `8GiB`, `1G`, `4096`.
fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .with_context(|| format!("size `{s}` does not start with a number"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => anyhow::bail!("unknown size unit `{other}` in `{s}` (use KiB, MiB, GiB, TiB)"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("size `{s}` is too large"))
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let timing: TimingModel = args.timing.parse().map_err(anyhow::Error::msg)?;
    let path = match args.device.as_str() {
        "sim" => {
            std::fs::create_dir_all(&args.data_dir)
                .with_context(|| format!("creating {}", args.data_dir.display()))?;
            args.data_dir.join(SIM_DEVICE_FILE)
        }
        d => PathBuf::from(
            d.strip_prefix("file:")
                .with_context(|| format!("--device `{d}`: use sim or file:PATH"))?,
        ),
    };
    let backend = Backend::File(path.clone());
    let geometry = match Ftl::probe(&backend) {
        Ok(g) => g,
        Err(_) if !path.exists() => Geometry::paper_card(parse_size(&args.capacity)?)?,
        Err(hwftl_sim::DeviceError::NotFormatted) => {
            Geometry::paper_card(parse_size(&args.capacity)?)?
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut config = DeviceConfig::new(geometry);
    config.timing = timing;
    let dev = Ftl::open_or_format(&backend, config)
        .with_context(|| format!("opening the device at {}", path.display()))?;
    let s = dev.stats();
    println!("device      {}", dev.describe());
    println!("geometry    {geometry}");
    println!(
        "capacity    {} MiB in {} segments of {} MiB",
        geometry.capacity_bytes() >> 20,
        geometry.segments(),
        geometry.segment_bytes() >> 20
    );
    println!("timing      {timing}");
    println!(
        "segments    {} free, {} open, {} full, {} read-only",
        s.free_segments, s.open_segments, s.full_segments, s.read_only_segments
    );
    println!(
        "wear        P/E {}..{}, {} bad blocks",
        s.pe_min, s.pe_max, s.bad_blocks
    );
    dev.close().context("closing the device")?;
    println!(
        "The device is ready. This build has no key-value server yet: the RESP server lands \
         with the engine and firmware work (docs/ARCHITECTURE.md)."
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096").ok(), Some(4096));
        assert_eq!(parse_size("512MiB").ok(), Some(512 << 20));
        assert_eq!(parse_size("8GiB").ok(), Some(8 << 30));
        assert_eq!(parse_size("1g").ok(), Some(1 << 30));
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("99999999999999TiB").is_err());
    }
}
