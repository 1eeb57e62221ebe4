package autoscaling

// index finds instances by providerID and by machine name. It is the one
// place that keeps the two maps in step: every instance in it is under its
// current providerID and its name, and nothing else is. It is not safe for
// concurrent use; Core.mu guards it.
type index struct {
	byProviderID map[string]*instance
	byName       map[string]*instance
}

func newIndex() index {
	return index{byProviderID: map[string]*instance{}, byName: map[string]*instance{}}
}

// add puts inst under its name and providerID.
func (x index) add(inst *instance) {
	x.byName[inst.name] = inst
	x.byProviderID[inst.providerID] = inst
}

// setProviderID moves inst to its real providerID, once the cloud gave it
// (a placeholder stood in until then).
func (x index) setProviderID(inst *instance, providerID string) {
	if x.byProviderID[inst.providerID] == inst {
		delete(x.byProviderID, inst.providerID)
	}
	inst.providerID, inst.placeholder = providerID, false
	x.byProviderID[providerID] = inst
}

// remove takes inst out; an entry another instance holds stays.
func (x index) remove(inst *instance) {
	if x.byName[inst.name] == inst {
		delete(x.byName, inst.name)
	}
	if x.byProviderID[inst.providerID] == inst {
		delete(x.byProviderID, inst.providerID)
	}
}

// byID is the instance with this providerID, nil when none.
func (x index) byID(providerID string) *instance { return x.byProviderID[providerID] }

// named is the instance with this machine name, nil when none.
func (x index) named(name string) *instance { return x.byName[name] }

// listed finds what a List returned: by providerID, then by machine name
// (a placeholder's machine, listed before Create returned its id).
func (x index) listed(providerID, name string) *instance {
	if inst := x.byProviderID[providerID]; inst != nil {
		return inst
	}
	if name != "" {
		return x.byName[name]
	}
	return nil
}

// node finds CA's node: by providerID, by machine name, or by a fake
// node's name, which is its instance's providerID.
func (x index) node(n Node) *instance {
	if n.ProviderID != "" {
		if inst := x.byProviderID[n.ProviderID]; inst != nil {
			return inst
		}
	}
	if n.Name != "" {
		if inst := x.byName[n.Name]; inst != nil {
			return inst
		}
		if inst := x.byProviderID[n.Name]; inst != nil {
			return inst
		}
	}
	return nil
}
