//! `allot top`: a live view of the broker — its cells, their CPUs, what
//! they borrow, how busy they are, the runtimes in them, and who waits —
//! refreshed every `--interval` (1 s by default) until `q`.
//!
//! The view is a pure function of the last status document
//! (`allot_proto::status::Status`, fetched like `allot status` does) and
//! the error of the last fetch, if any: [`draw`] renders a [`View`] into
//! any ratatui backend, so the layout is unit-tested on a test backend and
//! the live test drives the real binary in tmux. A broker that goes away
//! leaves the last picture on screen, marked stale, with the reason; the
//! view recovers when it comes back.

use super::status::{cell_text, fetch, name_of, runtimes_text};
use allot_proto::status::{CellStatus, Status};
use allot_topo::CpuSet;
use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `allot top`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Broker socket [default: $ALLOT_SOCKET or the per-user default].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Refresh period in milliseconds (100 to 10000).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    interval: u64,
}

/// What is on screen: the last status that arrived and the last failure.
#[derive(Debug, Default)]
pub struct View {
    /// Where the broker is.
    pub socket: String,
    /// The last status document received.
    pub status: Option<Status>,
    /// Why the last fetch failed (the status shown is then stale).
    pub error: Option<String>,
}

/// Colours cycled over cell ids, so a cell has the same colour in the CPU
/// map and the table.
const COLOURS: [Color; 6] = [
    Color::Cyan,
    Color::Yellow,
    Color::Magenta,
    Color::Green,
    Color::Blue,
    Color::Red,
];

fn colour(id: u64) -> Color {
    COLOURS[(id as usize) % COLOURS.len()]
}

/// One span per CPU of the machine: the CPU number and the cells holding
/// it (several for the stacked pool; `·` for none).
fn cpu_map(s: &Status) -> Line<'static> {
    let usable = CpuSet::parse_list(&s.machine.usable).unwrap_or_default();
    let held: Vec<(u64, CpuSet)> = s
        .cells
        .iter()
        .map(|c| (c.id, CpuSet::parse_list(&c.cpus).unwrap_or_default()))
        .collect();
    let mut spans = vec![Span::raw("CPUs ")];
    for cpu in usable.iter() {
        spans.push(Span::styled(
            format!("{cpu}:"),
            Style::default().add_modifier(Modifier::DIM),
        ));
        let mut any = false;
        for (id, set) in &held {
            if set.contains(cpu) {
                if any {
                    spans.push(Span::raw(","));
                }
                spans.push(Span::styled(
                    id.to_string(),
                    Style::default()
                        .fg(colour(*id))
                        .add_modifier(Modifier::BOLD),
                ));
                any = true;
            }
        }
        if !any {
            spans.push(Span::raw("·"));
        }
        spans.push(Span::raw("  "));
    }
    Line::from(spans)
}

/// A bar of `width` characters filled to `busy / cpus`.
/// A cell's memory for the table: used, then its limit, then `!` when
/// the kernel killed one of its processes for want of memory.
fn memory_text(c: &allot_proto::status::CellStatus) -> String {
    use allot_spec::Size;
    let Some(m) = &c.memory else {
        return "-".into();
    };
    let mut t = Size(m.current).to_string();
    if m.limit != 0 {
        t.push_str(&format!("/{}", Size(m.limit)));
    }
    if m.oom_kills > 0 {
        t.push('!');
    }
    t
}

/// Work outside the cells on a cell's CPUs for the table: CPUs' worth it
/// used at the last tick, then `-N` when N of them are left to it.
fn outside_text(c: &allot_proto::status::CellStatus) -> String {
    match c.outside {
        None => "-".into(),
        Some(o) if o.taken > 0 => format!("{:.2} -{}", o.used, o.taken),
        Some(o) => format!("{:.2}", o.used),
    }
}

fn busy_bar(busy: f64, cpus: usize, width: usize) -> String {
    let frac = if cpus == 0 {
        0.0
    } else {
        (busy / cpus as f64).clamp(0.0, 1.0)
    };
    let full = (frac * width as f64).round() as usize;
    format!("{}{}", "█".repeat(full), "░".repeat(width - full))
}

/// Renders `v` into the frame.
/// A column of the cells' table: its header, its width, how much it
/// matters (0 always shown; higher ones leave first on a narrow
/// terminal), and its cell for a cell.
struct Column {
    header: &'static str,
    width: Constraint,
    rank: u8,
    cell: fn(&CellStatus) -> Cell<'static>,
}

/// Every column, in display order.
fn all_columns() -> Vec<Column> {
    fn cpus(c: &CellStatus) -> usize {
        CpuSet::parse_list(&c.cpus).map_or(0, |s| s.len())
    }
    vec![
        Column {
            header: "ID",
            width: Constraint::Length(4),
            rank: 0,
            cell: |c| Cell::from(c.id.to_string()).style(Style::default().fg(colour(c.id))),
        },
        Column {
            header: "NAME",
            width: Constraint::Min(8),
            rank: 0,
            cell: |c| Cell::from(name_of(c)),
        },
        Column {
            header: "CPUS",
            width: Constraint::Length(8),
            rank: 0,
            cell: |c| Cell::from(cell_text(&c.cpus)),
        },
        Column {
            header: "LENT",
            width: Constraint::Length(6),
            rank: 3,
            cell: |c| Cell::from(cell_text(&c.lent)),
        },
        Column {
            header: "THR",
            width: Constraint::Length(4),
            rank: 0,
            cell: |c| Cell::from(c.threads.to_string()),
        },
        Column {
            header: "SHARE",
            width: Constraint::Length(6),
            rank: 2,
            cell: |c| Cell::from(format!("{:.2}", c.share)),
        },
        Column {
            header: "BUSY",
            width: Constraint::Length(5),
            rank: 1,
            cell: |c| Cell::from(format!("{:.2}", c.busy)),
        },
        Column {
            header: "",
            width: Constraint::Length(10),
            rank: 8,
            cell: |c| Cell::from(busy_bar(c.busy, cpus(c), 10)),
        },
        Column {
            header: "OUT",
            width: Constraint::Length(8),
            rank: 5,
            cell: |c| Cell::from(outside_text(c)),
        },
        Column {
            header: "MIN-MAX",
            width: Constraint::Length(9),
            rank: 4,
            cell: |c| {
                Cell::from(format!(
                    "{}-{}{}",
                    c.spec.min,
                    if c.spec.max == 0 {
                        "all".to_string()
                    } else {
                        c.spec.max.to_string()
                    },
                    if c.spec.exclusive { " excl" } else { "" }
                ))
            },
        },
        Column {
            header: "MEM",
            width: Constraint::Length(12),
            rank: 7,
            cell: |c| Cell::from(memory_text(c)),
        },
        Column {
            header: "GEN",
            width: Constraint::Length(5),
            rank: 9,
            cell: |c| Cell::from(c.generation.to_string()),
        },
        Column {
            header: "RUNTIMES",
            width: Constraint::Min(10),
            rank: 6,
            cell: |c| Cell::from(runtimes_text(c)),
        },
    ]
}

/// The columns that fit `width` characters (a column takes its width and
/// one space): the most important first, shown in display order. Pure.
fn columns_for(width: u16) -> Vec<Column> {
    let all = all_columns();
    let size = |c: &Column| match c.width {
        Constraint::Length(n) | Constraint::Min(n) => n + 1,
        _ => 1,
    };
    let mut by_rank: Vec<usize> = (0..all.len()).collect();
    by_rank.sort_by_key(|&i| all[i].rank);
    let mut used = 0u16;
    let mut keep = vec![false; all.len()];
    for i in by_rank {
        if all[i].rank == 0 || used + size(&all[i]) <= width {
            used += size(&all[i]);
            keep[i] = true;
        }
    }
    all.into_iter()
        .zip(keep)
        .filter_map(|(c, k)| k.then_some(c))
        .collect()
}

pub fn draw(f: &mut Frame, v: &View) {
    // A stale picture says why on a line of its own (not cut off the end
    // of the first at 80 columns).
    let stale = u16::from(v.status.is_some() && v.error.is_some());
    let [head, map, cells, queue, foot] = Layout::vertical([
        Constraint::Length(2 + stale),
        Constraint::Length(1),
        Constraint::Min(4),
        Constraint::Length(v.status.as_ref().map_or(0, |s| {
            s.queue.len().min(5) as u16 + u16::from(!s.queue.is_empty())
        })),
        Constraint::Length(1),
    ])
    .areas(f.area());

    let Some(s) = &v.status else {
        let msg = v.error.clone().unwrap_or_else(|| "connecting…".into());
        f.render_widget(
            Paragraph::new(vec![
                Line::from(format!("allot top: broker at {}", v.socket)),
                Line::from(Span::styled(msg, Style::default().fg(Color::Red))),
            ]),
            head,
        );
        f.render_widget(Paragraph::new("q quit"), foot);
        return;
    };
    let (b, m) = (&s.broker, &s.machine);
    let first = vec![Span::styled(
        format!(
            "broker pid {} · {} backend · {} policy · up {:.0} s · {}",
            b.pid, b.backend, b.policy, b.uptime_s, m.summary
        ),
        Style::default().add_modifier(Modifier::BOLD),
    )];
    let stale_line = v.error.as_ref().map(|e| {
        Line::from(Span::styled(
            format!("STALE: {}", cell_text(e)),
            Style::default().fg(Color::Red),
        ))
    });
    let mut second = vec![Span::raw(format!(
        "{} cells · {} waiting · CPUs for cells {} · stacked pool {} · idle {}",
        s.cells.len(),
        s.queue.len(),
        m.capacity,
        cell_text(&m.pool),
        cell_text(&m.idle)
    ))];
    if let Some(l) = &s.load {
        let mut t = format!(" · load {:.2}", l.busy);
        if let (Some(c), Some(u)) = (l.cells, l.unmanaged) {
            t.push_str(&format!(": cells {c:.2}, outside {u:.2}"));
        }
        second.push(Span::raw(t));
    }
    if let Some(p) = &b.journal_problem {
        second.push(Span::styled(
            format!("  JOURNAL: {}", cell_text(p)),
            Style::default().fg(Color::Red),
        ));
    }
    let mut lines = vec![Line::from(first)];
    lines.extend(stale_line);
    lines.push(Line::from(second));
    f.render_widget(Paragraph::new(lines), head);
    f.render_widget(Paragraph::new(cpu_map(s)), map);

    let shown = columns_for(cells.width.saturating_sub(2));
    let header = Row::new(shown.iter().map(|c| c.header))
        .style(Style::default().add_modifier(Modifier::REVERSED));
    let rows = s
        .cells
        .iter()
        .map(|c| Row::new(shown.iter().map(|col| (col.cell)(c))));
    let widths: Vec<Constraint> = shown.iter().map(|c| c.width).collect();
    let title = if s.cells.is_empty() {
        " no cells "
    } else {
        " cells "
    };
    f.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(title)),
        cells,
    );

    if !s.queue.is_empty() {
        let mut lines = vec![Line::from(Span::styled(
            "waiting:",
            Style::default().add_modifier(Modifier::BOLD),
        ))];
        for q in s.queue.iter().take(5) {
            let name = if q.private {
                format!("(uid {})", q.uid)
            } else {
                cell_text(&q.name)
            };
            lines.push(Line::from(format!(
                "  {}. cell {} ({}): {}",
                q.position,
                q.id,
                name,
                cell_text(&q.reason)
            )));
        }
        f.render_widget(Paragraph::new(lines), queue);
    }
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled("q", Style::default().add_modifier(Modifier::BOLD)),
            Span::raw(
                " quit · BUSY: CPUs kept busy · OUT: outside work on its CPUs (-N: N left to \
                 it) · GEN: grant changes",
            ),
        ])),
        foot,
    );
}

/// Runs `allot top`.
pub fn run(a: Args) -> i32 {
    if !std::io::stdout().is_terminal() {
        eprintln!("allot: top needs a terminal; in scripts use `allot status` (or --json)");
        return 2;
    }
    if !(100..=10_000).contains(&a.interval) {
        eprintln!(
            "allot: --interval {} is out of range (100 to 10000)",
            a.interval
        );
        return 2;
    }
    let socket = a.socket.unwrap_or_else(allot_proto::default_socket_path);
    let period = Duration::from_millis(a.interval);
    let mut view = View {
        socket: socket.display().to_string(),
        ..View::default()
    };
    let mut terminal = ratatui::init();
    let result = (|| -> std::io::Result<()> {
        loop {
            match fetch(&socket) {
                Ok(s) => {
                    view.status = Some(s);
                    view.error = None;
                }
                Err(e) => view.error = Some(format!("{e:#}")),
            }
            terminal.draw(|f| draw(f, &view))?;
            let until = Instant::now() + period;
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                if !event::poll(left)? {
                    break;
                }
                match event::read()? {
                    Event::Key(k) if k.kind == KeyEventKind::Press => {
                        let ctrl_c = k.modifiers.contains(KeyModifiers::CONTROL)
                            && k.code == KeyCode::Char('c');
                        if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                            return Ok(());
                        }
                    }
                    Event::Resize(..) => {
                        terminal.draw(|f| draw(f, &view))?;
                    }
                    _ => {}
                }
            }
        }
    })();
    ratatui::restore();
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("allot: top: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_proto::status::{
        BrokerStatus, CellStatus, MachineStatus, QueuedStatus, STATUS_VERSION, SpecStatus,
    };
    use allot_spec::Placement;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn spec() -> SpecStatus {
        SpecStatus {
            min: 1,
            max: 2,
            weight: 1,
            exclusive: false,
            placement: Placement::Any,
            contract: "pinned".into(),
            time: Default::default(),
            goal: Default::default(),
            memory_min: 0,
            memory_max: 0,
            cache_ways: 0,
            mem_bandwidth: 0,
        }
    }

    fn status() -> Status {
        let cell = |id: u64, name: &str, cpus: &str, busy: f64| CellStatus {
            id,
            name: name.into(),
            uid: 1000,
            private: false,
            pids: vec![42],
            cpus: cpus.into(),
            lent: String::new(),
            entitled: cpus.into(),
            held: String::new(),
            threads: 1,
            generation: 3,
            stacked: true,
            share: 0.5,
            demand: None,
            busy,
            progress: 0,
            busy_reported: 0,
            pool_stats: None,
            spec: spec(),
            runtimes: vec![],
            runtimes_unread: 0,
            delivery: None,
            perf: None,
            waiting_for_message: false,
            paused: None,
            partition: None,
            memory: None,
            cache: None,
            timeline: None,
            outside: None,
        };
        Status {
            version: STATUS_VERSION,
            broker: BrokerStatus {
                pid: 7,
                instance: 1,
                backend: "dry-run".into(),
                policy: "fair-share".into(),
                lend: true,
                uptime_s: 12.0,
                notes: vec![],
                journal_problem: None,
                weigh: "threads".into(),
                together_weight: Some(200),
                weight_wanted: 200,
                made_ahead: None,
            },
            machine: MachineStatus {
                name: "test".into(),
                summary: "4 CPUs".into(),
                usable: "0-3".into(),
                capacity: 4,
                reserve: String::new(),
                pool: "2-3".into(),
                time: String::new(),
                time_reserve: 0.05,
                idle: String::new(),
                held_outside: String::new(),
                memory: None,
            },
            cells: vec![
                cell(1, "build", "0-1", 2.0),
                cell(2, "sim", "2-3", 0.5),
                cell(3, "\x1b[31mevil", "2-3", 0.0),
            ],
            queue: vec![QueuedStatus {
                id: 4,
                name: "late".into(),
                uid: 1000,
                private: false,
                position: 1,
                reason: "no CPU left".into(),
                spec: spec(),
            }],
            load: None,
            channels: vec![],
        }
    }

    fn screen(v: &View, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, v)).unwrap();
        let buf = t.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..h {
            for x in 0..w {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn cells_cpus_and_the_queue_are_on_screen() {
        let v = View {
            socket: "/s".into(),
            status: Some(status()),
            error: None,
        };
        let s = screen(&v, 120, 16);
        assert!(s.contains("broker pid 7"), "{s}");
        assert!(s.contains("build") && s.contains("sim"), "{s}");
        assert!(s.contains("0:1") && s.contains("2:2,3"), "the CPU map: {s}");
        assert!(s.contains("1. cell 4 (late): no CPU left"), "{s}");
        assert!(s.contains("██████████"), "cell 1 is fully busy: {s}");
        assert!(
            !s.contains('\x1b'),
            "a name's escape reached the screen: {s}"
        );
        assert!(s.contains("q quit"), "{s}");
    }

    #[test]
    fn a_lost_broker_leaves_the_picture_marked_stale() {
        let v = View {
            socket: "/s".into(),
            status: Some(status()),
            error: Some("cannot reach a broker".into()),
        };
        let s = screen(&v, 160, 16);
        assert!(s.contains("STALE: cannot reach a broker"), "{s}");
        assert!(s.contains("build"), "{s}");
        let v = View {
            socket: "/s".into(),
            status: None,
            error: Some("cannot reach a broker".into()),
        };
        let s = screen(&v, 80, 10);
        assert!(
            s.contains("broker at /s") && s.contains("cannot reach"),
            "{s}"
        );
    }

    #[test]
    fn work_outside_the_cells_shows_in_the_head_and_per_cell() {
        let mut st = status();
        st.load = Some(allot_proto::status::LoadStatus {
            window_s: 1.0,
            busy: 1.9,
            cells: Some(1.0),
            unmanaged: Some(0.9),
            pressure: None,
            running: 3,
            counters: None,
        });
        st.cells[0].outside = Some(allot_proto::status::OutsideStatus {
            used: 0.5,
            waiting: Some(0.45),
            taken: 1,
        });
        let v = View {
            socket: "/s".into(),
            status: Some(st),
            error: None,
        };
        let s = screen(&v, 160, 16);
        assert!(s.contains("load 1.90: cells 1.00, outside 0.90"), "{s}");
        assert!(s.contains("OUT") && s.contains("0.50 -1"), "{s}");
    }

    #[test]
    fn an_80_column_terminal_keeps_whole_columns_and_the_stale_reason() {
        let mut st = status();
        st.cells[0].runtimes = vec![];
        let v = View {
            socket: "/s".into(),
            status: Some(st),
            error: Some("cannot reach a broker at /s: connection refused".into()),
        };
        let s = screen(&v, 80, 24);
        assert!(
            s.contains("STALE: cannot reach a broker at /s: connection refused"),
            "{s}"
        );
        // Every header shown is whole, and the ones that always matter are
        // there; the bar and the grant generation leave first.
        let header = s.lines().find(|l| l.contains("NAME")).unwrap();
        for h in ["ID", "NAME", "CPUS", "THR", "BUSY", "SHARE"] {
            assert!(header.contains(h), "{header}");
        }
        assert!(!header.contains("GEN"), "{header}");
        let names: Vec<&str> = columns_for(78).iter().map(|c| c.header).collect();
        let widths: u16 = columns_for(78)
            .iter()
            .map(|c| match c.width {
                Constraint::Length(n) | Constraint::Min(n) => n + 1,
                _ => 1,
            })
            .sum();
        assert!(widths <= 78, "{names:?}");
        assert_eq!(columns_for(200).len(), all_columns().len());
        assert!(s.contains("build"), "{s}");
        assert!(s.contains("q quit"), "{s}");
    }

    #[test]
    fn busy_bars_fill_to_the_share_of_cpus_used() {
        assert_eq!(busy_bar(1.0, 2, 4), "██░░");
        assert_eq!(busy_bar(5.0, 2, 4), "████");
        assert_eq!(busy_bar(0.0, 0, 3), "░░░");
    }
}
