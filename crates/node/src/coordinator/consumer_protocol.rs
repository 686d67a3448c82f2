//! The consumer protocol's opaque bytes, read only where the broker needs them (Kafka's
//! `ConsumerProtocolSubscription` and `ConsumerProtocolAssignment`, versions 0–3, non-flexible):
//! which topics a member subscribes to (OffsetDelete refuses offsets of a consumed topic) and
//! which partitions it was assigned (`keel groups describe`). The coordinator itself passes both
//! through untouched; the client-side assignors decide.

/// The topics of a subscription; empty if the bytes are not a consumer subscription.
pub fn subscription_topics(bytes: &[u8]) -> Vec<String> {
    let mut r = Reader { bytes, at: 0 };
    (|| {
        let _version = r.i16()?;
        let count = r.i32()?;
        let mut topics = Vec::new();
        for _ in 0..count.max(0) {
            topics.push(r.string()?);
        }
        Some(topics)
    })()
    .unwrap_or_default()
}

/// The (topic, partitions) of an assignment; empty if the bytes are not a consumer assignment.
pub fn assignment_partitions(bytes: &[u8]) -> Vec<(String, Vec<i32>)> {
    let mut r = Reader { bytes, at: 0 };
    (|| {
        let _version = r.i16()?;
        let count = r.i32()?;
        let mut out = Vec::new();
        for _ in 0..count.max(0) {
            let topic = r.string()?;
            let n = r.i32()?;
            let mut partitions = Vec::new();
            for _ in 0..n.max(0) {
                partitions.push(r.i32()?);
            }
            out.push((topic, partitions));
        }
        Some(out)
    })()
    .unwrap_or_default()
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let slice = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(slice)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_subscriptions_and_assignments() {
        // version 0, topics ["a", "bc"], user data null
        let sub = [
            0, 0, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c', 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(subscription_topics(&sub), ["a", "bc"]);
        // version 0, [("a", [0, 2])], user data empty
        let asg = [
            0, 0, 0, 0, 0, 1, 0, 1, b'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0,
        ];
        assert_eq!(assignment_partitions(&asg), [("a".to_string(), vec![0, 2])]);
        assert!(subscription_topics(&[1]).is_empty());
        assert!(assignment_partitions(&[0, 0, 0, 0, 0, 9]).is_empty());
    }
}
