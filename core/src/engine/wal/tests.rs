use super::format::{Parsed, chain, salt};
use super::*;
use std::sync::Arc;

/// A log file in memory; `room` caps its length (a full disk).
#[derive(Debug, Default, Clone)]
struct MemFile {
    data: Arc<std::sync::Mutex<Vec<u8>>>,
    room: Arc<std::sync::Mutex<Option<usize>>>,
}

impl MemFile {
    fn bytes(&self) -> Vec<u8> {
        self.data.lock().unwrap().clone()
    }
}

impl LogFile for MemFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let mut d = self.data.lock().unwrap();
        let end = offset as usize + buf.len();
        if let Some(room) = *self.room.lock().unwrap()
            && end > room
        {
            return Err(std::io::Error::from_raw_os_error(28));
        }
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(buf);
        Ok(())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let d = self.data.lock().unwrap();
        let from = (offset as usize).min(d.len());
        let n = buf.len().min(d.len() - from);
        buf[..n].copy_from_slice(&d[from..from + n]);
        Ok(n)
    }
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.data.lock().unwrap().len() as u64)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.data.lock().unwrap().resize(len as usize, 0);
        Ok(())
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
}

const ID: u64 = 77;

fn wal(file: &MemFile, next: u64) -> Wal {
    Wal::start(
        Box::new(file.clone()),
        "mem".into(),
        ID,
        next,
        LogCheckpoints::default(),
    )
    .unwrap()
}

fn header(data: &[u8]) -> Header {
    match Header::parse(data) {
        Parsed::Current(h) => h,
        other => panic!("header: {other:?}"),
    }
}

fn bodies(data: &[u8], cycle: u64) -> Vec<(u64, Vec<u8>)> {
    chain(data, salt(ID, cycle), Some(cycle))
        .unwrap()
        .records
        .into_iter()
        .map(|f| (f.seq, data[f.body].to_vec()))
        .collect()
}

#[test]
fn records_read_back_in_order_under_their_cycle_only() {
    let f = MemFile::default();
    let w = wal(&f, 1);
    for i in 0..300u32 {
        let body = vec![i as u8; (i as usize * 37) % 5000];
        w.append(&body, || {}).unwrap();
        assert_eq!(w.last_seq(), u64::from(i) + 1);
    }
    let data = f.bytes();
    let got = bodies(&data, 1);
    assert_eq!(got.len(), 300);
    for (i, (seq, body)) in got.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1);
        assert_eq!(body.len(), (i * 37) % 5000);
    }
    // Another store's or another cycle's salt sees nothing.
    assert!(
        chain(&data, salt(ID + 1, 1), Some(1))
            .unwrap()
            .records
            .is_empty()
    );
    assert!(
        chain(&data, salt(ID, 2), Some(2))
            .unwrap()
            .records
            .is_empty()
    );
    // The file grew in steps, and the header says how long it is.
    assert_eq!(header(&data).capacity, data.len() as u64);
    assert_eq!(data.len() as u64 % GROW_STEP, HEADER);
}

#[test]
fn a_new_cycle_is_announced_before_the_checkpoint_and_ends_at_its_last_record() {
    let f = MemFile::default();
    let w = wal(&f, 1);
    for _ in 0..50 {
        w.append(&[7; 900], || {}).unwrap();
    }
    let (cycle, cap) = w.begin_cycle().unwrap();
    assert_eq!(cycle, 51);
    let h = header(&f.bytes());
    assert_eq!((h.cycle, h.prev, h.prev_end, h.capacity), (51, 1, 50, cap));
    // Before the reset the old cycle's records are all still there.
    assert_eq!(bodies(&f.bytes(), 1).len(), 50);
    w.reset();
    w.append(&[1; 10], || {}).unwrap();
    w.append(&[2; 10], || {}).unwrap();
    let data = f.bytes();
    assert_eq!(
        bodies(&data, 51),
        vec![(51, vec![1; 10]), (52, vec![2; 10])]
    );
    // A second checkpoint with nothing logged rewrites nothing.
    let (c, _) = w.begin_cycle().unwrap();
    w.reset();
    assert_eq!(w.begin_cycle().unwrap().0, c);
    assert_eq!(header(&f.bytes()).cycle, 53);
}

#[test]
fn a_torn_tail_ends_the_chain_and_a_damaged_middle_hides_records() {
    let f = MemFile::default();
    let w = wal(&f, 1);
    for i in 0..10u8 {
        w.append(&[i; 700], || {}).unwrap();
    }
    let data = f.bytes();
    let ends: Vec<usize> = chain(&data, salt(ID, 1), Some(1))
        .unwrap()
        .records
        .iter()
        .map(|f| f.body.end)
        .collect();
    let mut torn = data.clone();
    for b in &mut torn[ends[8] + 100..ends[9]] {
        *b = 0;
    }
    let c = chain(&torn, salt(ID, 1), Some(1)).unwrap();
    assert_eq!((c.records.len(), c.hidden.is_none()), (9, true));
    let mut bad = data.clone();
    bad[ends[4] - 10] ^= 1;
    let c = chain(&bad, salt(ID, 1), Some(1)).unwrap();
    assert_eq!(c.records.len(), 4);
    assert!(c.hidden.is_some(), "records 6–10 follow the damage");
}

#[test]
fn a_growth_that_does_not_fit_is_given_back() {
    let f = MemFile::default();
    let w = wal(&f, 1);
    let start = f.bytes().len();
    *f.room.lock().unwrap() = Some(start + 4096);
    let mut filled = 0;
    let err = loop {
        match w.append(&[9; 1000], || {}) {
            Ok(_) => filled += 1,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, AppendError::NoRoom(Error::StorageFull(_))),
        "{err:?}"
    );
    assert!(filled > 900);
    assert_eq!(
        f.bytes().len(),
        start,
        "the zeros of the failed growth are gone"
    );
    // After a checkpoint the log starts again at its first slot: no growth needed.
    w.begin_cycle().unwrap();
    w.reset();
    w.append(&[1; 1000], || {}).unwrap();
    assert_eq!(f.bytes().len(), start);
}

#[test]
fn a_log_of_format_1_still_reads() {
    let mut data = format::legacy_page();
    for seq in 1..=3u64 {
        format::frame(&mut data, format::LEGACY_SALT, seq, &[seq as u8; 9]);
        data.resize(data.len().next_multiple_of(8), 0);
    }
    data.resize(64 << 10, 0);
    assert_eq!(Header::parse(&data), Parsed::Legacy);
    let c = format::legacy_chain(&data, 1).unwrap();
    assert_eq!(
        c.past(1).map(|f| f.seq).collect::<Vec<_>>(),
        [2, 3],
        "records past the applied one"
    );
}

#[test]
fn an_empty_or_headerless_file_holds_nothing() {
    assert_eq!(Header::parse(&[]), Parsed::Absent);
    assert_eq!(Header::parse(&[0; 8192]), Parsed::Absent);
    assert_eq!(Header::parse(&[1; 8192]), Parsed::Damaged);
}
