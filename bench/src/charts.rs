//! PNG charts (latency CDFs) with plotters, text rendered with a system TrueType font.

use std::path::Path;

use plotters::prelude::*;

/// Named sample sets for one chart.
pub type Series = Vec<(String, Vec<f64>)>;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Register the font once; charts are skipped (with a note) when it is missing.
pub fn init() -> Result<(), String> {
    let bytes = std::fs::read(FONT)
        .map_err(|e| format!("{FONT}: {e} (apt-get install fonts-dejavu-core)"))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| "the font did not load".to_string())
}

/// One CDF line per series; x in microseconds on a log scale.
pub fn cdf(path: &Path, title: &str, series: &[(String, Vec<f64>)]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut all: Vec<f64> = series
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .filter(|v| *v > 0.0)
        .collect();
    if all.is_empty() {
        return Ok(());
    }
    all.sort_by(|a, b| a.total_cmp(b));
    let lo = all[0].max(1.0);
    let hi = all[all.len() - 1].max(lo * 10.0);
    let root = BitMapBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(52)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("latency (µs, log scale)")
        .y_desc("fraction of samples ≤ x")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, samples)) in series.iter().enumerate() {
        let mut s: Vec<f64> = samples.iter().map(|v| v.max(lo)).collect();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len().max(1) as f64;
        let step = (s.len() / 2000).max(1);
        let points: Vec<(f64, f64)> = s
            .iter()
            .enumerate()
            .step_by(step)
            .map(|(k, v)| (*v, (k + 1) as f64 / n))
            .collect();
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The CDF charts of sections 1, 2 and 3 into `out`, if the charts' font is there.
pub fn draw(out: &Path, cycles: Series, handoffs: Series, expiry: Vec<f64>) {
    if let Err(err) = init() {
        eprintln!("charts skipped: {err}");
        return;
    }
    let charts: [(&str, &str, Series); 3] = [
        (
            "uncontended-latency.png",
            "Uncontended acquire + release cycle latency (CDF)",
            cycles,
        ),
        (
            "handoff-latency.png",
            "Handoff latency between clients, 32 clients, 1 ms hold (CDF)",
            handoffs,
        ),
        (
            "expiry-handoff.png",
            "Expiry handoff: deadline to the waiter's grant (CDF)",
            vec![("LOCK.ACQUIRE WAIT".into(), expiry)],
        ),
    ];
    for (file, title, series) in charts {
        if let Err(err) = cdf(&out.join(file), title, &series) {
            eprintln!("chart {file}: {err}");
        }
    }
}
